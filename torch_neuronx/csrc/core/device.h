// The neuron devices as torch sees them: the runtime behind them, how they are
// numbered, the current device of each host thread, and translation of
// runtime errors into torch's exception types.
#pragma once

#include <c10/core/Device.h>
#include <neuron_runtime/runtime.h>

#include <string>

namespace torch_neuronx {

// The highest device index supported, plus one: per-device tables (the
// current stream of each thread, the stream pools' counters) are sized for
// this many indices, and a numbering past it is refused.
constexpr int kMaxDeviceIndices = 64;

// The runtime, initialised on first use. Throws c10::Error with a clear
// message for a bad environment value or a forked child.
neuron_rt::Runtime& runtime();

// How this process's devices are numbered. The runtime's visible cores
// (NEURON_RT_VISIBLE_CORES) are neuron:<first> .. neuron:<first + count - 1>.
// `first` is 0, except in a process started by a launcher (LOCAL_RANK set),
// where it is the local rank: TorchNeuron numbers a rank's cores from its
// local rank, so neuron:<local_rank> is every rank's first device, as on CUDA.
// `limit` is torch's device count: every index of the host's job is below it
// (LOCAL_WORLD_SIZE - 1 + count under a launcher, first + count otherwise),
// so torch's `index < device_count()` checks and `rank % device_count()`
// heuristics hold as on a CUDA host.
struct DeviceNumbering {
  int first = 0;
  int count = 0;
  int limit = 0;
  bool owns(int64_t index) const {
    return index >= first && index < first + count;
  }
};
// Throws c10::Error naming the variable for a malformed environment; does not
// initialise the runtime.
DeviceNumbering deviceNumbering();

// The number of local ranks on this host as the default process group found
// it. Used instead of LOCAL_WORLD_SIZE when the launcher did not set it and
// the devices are numbered from LOCAL_RANK: the limit grows to
// local_world - 1 + count, the same on every local rank.
void setLocalWorldFromGroup(int local_world);

// torch's device count (DeviceNumbering::limit); does not initialise the
// runtime. Returns 0 when the environment is malformed (deviceCount() is
// noexcept in torch's guard).
c10::DeviceIndex deviceCount() noexcept;

// The message of an index that is not one of this process's devices, e.g.
// "Invalid device index neuron:2: there is 1 visible neuron device. Device
// index 2 is out of range. Valid range is 1 to 1 for this process (...)".
// `index` is text: Python's indices are not bounded.
std::string deviceIndexError(const std::string& index);

// Throws c10::IndexError unless 0 <= index < deviceCount(): an index of the
// numbering, which may belong to another rank of the job. Per-index state
// that never touches a device (default generators, streams' ids, memory
// statistics) exists for these, as CUDA's does for a device a process has
// not used.
void checkDeviceIndex(c10::DeviceIndex index);
// Throws c10::IndexError (deviceIndexError) unless `index` is one of this
// process's devices.
void checkOwnDevice(c10::DeviceIndex index);

// The runtime device behind neuron:<index>, one of this process's devices.
neuron_rt::Device& runtimeDevice(c10::DeviceIndex index);
// The runtime's index of neuron:<index> (index - first); checks the index.
int runtimeIndex(c10::DeviceIndex index);

// The current device: this process's first device until set_device.
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
