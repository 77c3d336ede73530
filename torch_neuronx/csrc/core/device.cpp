#include "core/device.h"

#include <c10/util/Exception.h>

#include <string>

namespace torch_neuronx {
namespace {

thread_local c10::DeviceIndex tls_current_device = 0;

}  // namespace

void rethrowRuntimeError(const neuron_rt::Error& e) {
  switch (e.status()) {
    case neuron_rt::Status::kInvalidArgument:
      TORCH_CHECK_INDEX(false, e.what());
    case neuron_rt::Status::kOutOfMemory:
      TORCH_CHECK_WITH(OutOfMemoryError, false, e.what());
    default:
      TORCH_CHECK(false, "neuron: ", e.what());
  }
}

neuron_rt::Runtime& runtime() {
  try {
    return neuron_rt::Runtime::get();
  } catch (const neuron_rt::Error& e) {
    rethrowRuntimeError(e);
  }
}

c10::DeviceIndex deviceCount() noexcept {
  try {
    return static_cast<c10::DeviceIndex>(
        neuron_rt::Runtime::visibleDeviceCount());
  } catch (...) {
    return 0;
  }
}

void checkDeviceIndex(c10::DeviceIndex index) {
  int count;
  try {
    count = neuron_rt::Runtime::visibleDeviceCount();
  } catch (const neuron_rt::Error& e) {
    rethrowRuntimeError(e);
  }
  TORCH_CHECK_INDEX(index >= 0 && index < count,
                    "Invalid device index neuron:", static_cast<int>(index),
                    ": there ", count == 1 ? "is " : "are ", count,
                    " visible neuron device", count == 1 ? "" : "s",
                    " (valid indices are 0..", count - 1,
                    "; see NEURON_RT_VISIBLE_CORES)");
}

neuron_rt::Device& runtimeDevice(c10::DeviceIndex index) {
  checkDeviceIndex(index);
  return runtime().device(index);
}

c10::DeviceIndex currentDevice() { return tls_current_device; }

void setCurrentDevice(c10::DeviceIndex index) {
  checkDeviceIndex(index);
  tls_current_device = index;
}

c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) {
  c10::DeviceIndex prev = tls_current_device;
  if (index != prev) setCurrentDevice(index);
  return prev;
}

}  // namespace torch_neuronx
