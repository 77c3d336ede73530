// The neuron devices as torch sees them: the runtime behind them, the current
// device of each host thread, and translation of runtime errors into torch's
// exception types.
#pragma once

#include <c10/core/Device.h>
#include <neuron_runtime/runtime.h>

namespace torch_neuronx {

// The runtime, initialised on first use. Throws c10::Error with a clear
// message for a bad environment value or a forked child.
neuron_rt::Runtime& runtime();

// Number of visible devices; does not initialise the runtime. Returns 0 when
// the environment is malformed (deviceCount() is noexcept in torch's guard).
c10::DeviceIndex deviceCount() noexcept;

// Throws c10::IndexError naming the number of visible devices.
void checkDeviceIndex(c10::DeviceIndex index);

neuron_rt::Device& runtimeDevice(c10::DeviceIndex index);

c10::DeviceIndex currentDevice();
void setCurrentDevice(c10::DeviceIndex index);
// Sets the device and returns the previous one.
c10::DeviceIndex exchangeDevice(c10::DeviceIndex index);

inline c10::Device neuronDevice(c10::DeviceIndex index) {
  return c10::Device(c10::DeviceType::PrivateUse1, index);
}

// Rethrows a neuron_rt::Error as the matching c10 exception.
[[noreturn]] void rethrowRuntimeError(const neuron_rt::Error& e);

}  // namespace torch_neuronx
