// The process-wide runtime: topology and the visible devices.
//
// Initialised on first use (never at load time) from the environment. A child
// process forked after initialisation cannot use the runtime (its worker
// threads did not survive the fork): get() then throws kForkedChild.
#pragma once

#include <memory>
#include <vector>

#include "neuron_runtime/device.h"
#include "neuron_runtime/topology.h"
#include "neuron_runtime/trace.h"

namespace neuron_rt {

class Runtime {
 public:
  // Initialises on first call. Throws neuron_rt::Error on a bad environment
  // value (kInvalidConfig) or in a forked child (kForkedChild).
  static Runtime& get();
  static bool initialized();
  // True in a child forked after the parent initialised the runtime.
  static bool inBadFork();

  // Device count without creating devices (no HBM is reserved).
  static int visibleDeviceCount();

  int deviceCount() const { return static_cast<int>(devices_.size()); }
  // Throws kInvalidArgument naming the number of visible devices.
  Device& device(int index);
  const Topology& topology() const { return topology_; }
  Trace& trace() { return trace_; }
  void synchronizeAll();

  explicit Runtime(const TopologyConfig& config);  // for tests

 private:
  Topology topology_;
  Trace trace_;
  std::vector<std::unique_ptr<Device>> devices_;
};

}  // namespace neuron_rt
