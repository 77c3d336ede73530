#include "core/hooks.h"

#include <c10/util/Exception.h>

#include "core/device.h"
#include "core/generator.h"
#include "core/pinned_allocator.h"
#include "core/storage.h"

namespace torch_neuronx {

bool Hooks::isAvailable() const { return deviceCount() > 0; }

bool Hooks::hasPrimaryContext(c10::DeviceIndex device_index) const {
  if (!neuron_rt::Runtime::initialized()) return false;
  try {
    return deviceNumbering().owns(device_index);
  } catch (const c10::Error&) {
    return false;
  }
}

void Hooks::init() const { (void)runtime(); }

c10::DeviceIndex Hooks::deviceCount() const {
  return torch_neuronx::deviceCount();
}

void Hooks::setCurrentDevice(c10::DeviceIndex device) const {
  torch_neuronx::setCurrentDevice(device);
}

c10::DeviceIndex Hooks::getCurrentDevice() const { return currentDevice(); }

c10::DeviceIndex Hooks::exchangeDevice(c10::DeviceIndex device) const {
  return torch_neuronx::exchangeDevice(device);
}

c10::DeviceIndex Hooks::maybeExchangeDevice(c10::DeviceIndex device) const {
  if (!deviceNumbering().owns(device)) return currentDevice();
  return torch_neuronx::exchangeDevice(device);
}

bool Hooks::isPinnedPtr(const void* data) const {
  return torch_neuronx::isPinnedPtr(data);
}

c10::Allocator* Hooks::getPinnedMemoryAllocator() const {
  return &pinnedAllocator();
}

c10::Device Hooks::getDeviceFromPtr(void* data) const {
  auto& rt = runtime();
  const int first = deviceNumbering().first;
  for (int i = 0; i < rt.deviceCount(); ++i)
    if (rt.device(i).hbm().contains(data))
      return neuronDevice(static_cast<c10::DeviceIndex>(first + i));
  TORCH_CHECK(false, "pointer ", data,
              " is not in the memory of any neuron device");
}

const at::Generator& Hooks::getDefaultGenerator(
    c10::DeviceIndex device_index) const {
  return defaultGenerator(device_index);
}

at::Generator Hooks::getNewGenerator(c10::DeviceIndex device_index) const {
  return makeGenerator(device_index);
}

void Hooks::resizePrivateUse1Bytes(const c10::Storage& storage,
                                   size_t newsize) const {
  resizeStorageBytes(storage.unsafeGetStorageImpl(), newsize);
}

void registerHooks() {
  static Hooks* hooks = new Hooks();
  at::RegisterPrivateUse1HooksInterface(hooks);
}

}  // namespace torch_neuronx
