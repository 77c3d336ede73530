// PrivateUse1 hooks: what ATen asks a backend (availability, device count,
// current device, pointer ownership).
#pragma once

#include <ATen/detail/PrivateUse1HooksInterface.h>

namespace torch_neuronx {

struct Hooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override;
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override;
  void init() const override;
  c10::DeviceIndex deviceCount() const override;
  void setCurrentDevice(c10::DeviceIndex device) const override;
  c10::DeviceIndex getCurrentDevice() const override;
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override;
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override;
  bool isPinnedPtr(const void* data) const override;
  c10::Allocator* getPinnedMemoryAllocator() const override;
  c10::Device getDeviceFromPtr(void* data) const override;
  const at::Generator& getDefaultGenerator(
      c10::DeviceIndex device_index) const override;
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override;
  void resizePrivateUse1Bytes(const c10::Storage& storage,
                              size_t newsize) const override;
};

void registerHooks();

}  // namespace torch_neuronx
