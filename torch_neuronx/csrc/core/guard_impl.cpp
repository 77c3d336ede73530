#include "core/guard_impl.h"

#include <c10/util/Exception.h>
#include <neuron_runtime/event.h>

#include "core/caching_allocator.h"
#include "core/device.h"
#include "core/stream.h"

namespace torch_neuronx {

c10::Device GuardImpl::exchangeDevice(c10::Device d) const {
  TORCH_INTERNAL_ASSERT(d.type() == kType);
  return neuronDevice(torch_neuronx::exchangeDevice(d.index()));
}

c10::Device GuardImpl::getDevice() const {
  return neuronDevice(currentDevice());
}

void GuardImpl::setDevice(c10::Device d) const {
  TORCH_INTERNAL_ASSERT(d.type() == kType);
  setCurrentDevice(d.index());
}

void GuardImpl::uncheckedSetDevice(c10::Device d) const noexcept {
  try {
    setCurrentDevice(d.index());
  } catch (...) {
  }
}

c10::Stream GuardImpl::getStream(c10::Device d) const {
  return currentStream(d.index());
}

c10::Stream GuardImpl::getDefaultStream(c10::Device d) const {
  return defaultStream(d.index());
}

c10::Stream GuardImpl::getStreamFromGlobalPool(c10::Device d,
                                               bool isHighPriority) const {
  return streamFromPool(d.index(), isHighPriority);
}

c10::Stream GuardImpl::getNewStream(c10::Device d, int priority) const {
  return streamFromPool(d.index(), priority < 0);
}

c10::Stream GuardImpl::exchangeStream(c10::Stream s) const {
  c10::Stream prev = currentStream(s.device_index());
  setCurrentStream(s);
  return prev;
}

c10::DeviceCapability GuardImpl::getDeviceCapability(c10::Device d) const {
  checkDeviceIndex(d.index() < 0 ? currentDevice() : d.index());
  // The simulated core computes with the CPU's kernels, so every dense dtype
  // is supported; quantized tensors cannot be placed on the device.
  c10::DeviceCapability cap;
  cap.capability_data.capability_bits &=
      ~((1ULL << c10::kIndex_QInt8) | (1ULL << c10::kIndex_QUInt8) |
        (1ULL << c10::kIndex_QInt32) | (1ULL << c10::kIndex_QUInt4x2) |
        (1ULL << c10::kIndex_QUInt2x4));
  return cap;
}

c10::DeviceIndex GuardImpl::deviceCount() const noexcept {
  return torch_neuronx::deviceCount();
}

void GuardImpl::destroyEvent(void* event, c10::DeviceIndex) const noexcept {
  delete static_cast<neuron_rt::Event*>(event);
}

void GuardImpl::record(void** event, const c10::Stream& stream,
                       c10::DeviceIndex device_index, c10::EventFlag) const {
  TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
              "Event device index ", static_cast<int>(device_index),
              " does not match recording stream's device index ",
              static_cast<int>(stream.device_index()), ".");
  if (!*event) *event = new neuron_rt::Event();
  static_cast<neuron_rt::Event*>(*event)->record(runtimeStream(stream));
  if (launchBlocking()) synchronizeStream(stream);
}

void GuardImpl::block(void* event, const c10::Stream& stream) const {
  if (!event) return;
  static_cast<neuron_rt::Event*>(event)->block(runtimeStream(stream));
}

bool GuardImpl::queryEvent(void* event) const {
  if (!event) return true;
  return static_cast<neuron_rt::Event*>(event)->query();
}

void GuardImpl::synchronizeEvent(void* event) const {
  if (!event) return;
  auto* e = static_cast<neuron_rt::Event*>(event);
  e->synchronize();
  if (e->device() >= 0) raisePendingError(e->device());
}

double GuardImpl::elapsedTime(void* start, void* end, c10::DeviceIndex) const {
  TORCH_CHECK(start && end,
              "Both events must be recorded before calculating elapsed time.");
  try {
    return static_cast<neuron_rt::Event*>(start)->elapsedMs(
        *static_cast<neuron_rt::Event*>(end));
  } catch (const neuron_rt::Error& e) {
    TORCH_CHECK(false, e.what());
  }
}

bool GuardImpl::queryStream(const c10::Stream& stream) const {
  return runtimeStream(stream).query();
}

void GuardImpl::synchronizeStream(const c10::Stream& stream) const {
  torch_neuronx::synchronizeStream(stream);
}

void GuardImpl::synchronizeDevice(c10::DeviceIndex device_index) const {
  torch_neuronx::synchronizeDevice(device_index);
}

void GuardImpl::recordDataPtrOnStream(const c10::DataPtr& data_ptr,
                                      const c10::Stream& stream) const {
  cachingAllocator().recordStream(data_ptr, stream);
}

}  // namespace torch_neuronx
