#include "core/device.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <string>

namespace torch_neuronx {
namespace {

// -1: not set by this thread, i.e. the process's first device.
thread_local int tls_current_device = -1;

// A launcher's variable: unset (-1) or a non-negative integer.
int launcherInt(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  const std::string s(v);
  const bool digits =
      s.size() <= 6 && std::all_of(s.begin(), s.end(), [](unsigned char c) {
        return std::isdigit(c) != 0;
      });
  TORCH_CHECK(digits, "invalid ", name, "='", s,
              "': expected a non-negative integer (torchrun sets it to the "
              "process's rank on its host)");
  return std::stoi(s);
}

// The host's number of local ranks as the process group found it (-1: no
// group yet). A process started without LOCAL_WORLD_SIZE (ranks of
// torch.multiprocessing.spawn that set LOCAL_RANK themselves) learns it at
// init_process_group, as TorchNeuron does, so that every local rank then has
// the same device count.
std::atomic<int> local_world_from_group{-1};

// The launcher's variables, read once the runtime is up (the numbering of
// the devices in use must not change under them).
struct LauncherEnv {
  int local_rank = -1;
  int local_world = -1;
};

LauncherEnv launcherEnv() {
  return {launcherInt("LOCAL_RANK"), launcherInt("LOCAL_WORLD_SIZE")};
}

DeviceNumbering numberingFor(int count, const LauncherEnv& env) {
  DeviceNumbering n;
  n.count = count;
  n.first = std::max(0, env.local_rank);
  n.limit = n.first + count;
  // Only for a numbering from LOCAL_RANK: a plain process's neuron:0 ..
  // neuron:<count - 1> stay its own, whatever group it joins.
  const int local_world = env.local_world > 0   ? env.local_world
                          : env.local_rank >= 0 ? local_world_from_group.load()
                                                : -1;
  if (n.first > 0 || local_world > 0)
    n.limit = std::max(n.limit, local_world - 1 + count);
  TORCH_CHECK(n.limit <= kMaxDeviceIndices, "LOCAL_RANK=", n.first, " with ",
              count, " visible neuron devices numbers them past neuron:",
              kMaxDeviceIndices - 1, ", the highest index supported");
  return n;
}

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

DeviceNumbering deviceNumbering() {
  if (neuron_rt::Runtime::initialized()) {
    // Fixed once the runtime is up (its devices and the launcher's rank are);
    // only the limit can still grow, when a process group sizes the host.
    static const int count = runtime().deviceCount();
    static const LauncherEnv env = launcherEnv();
    return numberingFor(count, env);
  }
  try {
    return numberingFor(neuron_rt::Runtime::visibleDeviceCount(),
                        launcherEnv());
  } catch (const neuron_rt::Error& e) {
    rethrowRuntimeError(e);
  }
}

void setLocalWorldFromGroup(int local_world) {
  TORCH_CHECK(local_world > 0 && local_world <= kMaxDeviceIndices,
              "invalid local world size ", local_world);
  local_world_from_group.store(local_world);
}

c10::DeviceIndex deviceCount() noexcept {
  try {
    return static_cast<c10::DeviceIndex>(deviceNumbering().limit);
  } catch (...) {
    return 0;
  }
}

std::string deviceIndexError(const std::string& index) {
  const DeviceNumbering n = deviceNumbering();
  std::string msg = "Invalid device index neuron:" + index + ": there ";
  if (n.count == 0)
    return msg + "are no visible neuron devices (see NEURON_RT_VISIBLE_CORES)";
  msg += n.count == 1
             ? "is 1 visible neuron device"
             : "are " + std::to_string(n.count) + " visible neuron devices";
  // TorchNeuron's wording, for scripts and logs written against it.
  msg += " (Device index " + index + " is out of range. Valid range is " +
         std::to_string(n.first) + " to " +
         std::to_string(n.first + n.count - 1) + " for this process; ";
  if (n.first > 0)
    msg += "a launched process's devices are numbered from its LOCAL_RANK=" +
           std::to_string(n.first) + "; ";
  return msg + "see NEURON_RT_VISIBLE_CORES)";
}

void checkDeviceIndex(c10::DeviceIndex index) {
  const DeviceNumbering n = deviceNumbering();
  TORCH_CHECK_INDEX(index >= 0 && index < n.limit,
                    deviceIndexError(std::to_string(index)));
}

void checkOwnDevice(c10::DeviceIndex index) {
  TORCH_CHECK_INDEX(deviceNumbering().owns(index),
                    deviceIndexError(std::to_string(index)));
}

int runtimeIndex(c10::DeviceIndex index) {
  checkOwnDevice(index);
  return index - deviceNumbering().first;
}

neuron_rt::Device& runtimeDevice(c10::DeviceIndex index) {
  const int i = runtimeIndex(index);
  return runtime().device(i);
}

c10::DeviceIndex currentDevice() {
  if (tls_current_device >= 0)
    return static_cast<c10::DeviceIndex>(tls_current_device);
  try {
    return static_cast<c10::DeviceIndex>(deviceNumbering().first);
  } catch (const c10::Error&) {
    return 0;  // a malformed environment is reported at first device use
  }
}

void setCurrentDevice(c10::DeviceIndex index) {
  checkOwnDevice(index);
  tls_current_device = index;
}

c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) {
  c10::DeviceIndex prev = currentDevice();
  if (index != prev) setCurrentDevice(index);
  return prev;
}

}  // namespace torch_neuronx
