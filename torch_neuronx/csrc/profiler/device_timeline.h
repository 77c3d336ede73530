// The profiler's device timeline: the runtime's trace records of one
// profiling session, turned into items with an estimated Trainium time and
// an estimated timeline (what the same stream order would take on a real
// NeuronCore). The Kineto plugin (kineto_plugin.cpp) logs them; Python reads
// the last session's items for the Parquet tables and the step summary.
#pragma once

#include <neuron_runtime/trace.h>
#include <neuron_runtime/trainium_estimate.h>

#include <cstdint>
#include <string>
#include <vector>

namespace torch_neuronx::profiler {

struct DeviceItem {
  int device;  // the process's device index (neuron:<device>)
  int stream;
  uint64_t seq;
  std::string name;
  std::string category;
  int64_t start_ns;  // unix time (the clock torch.profiler's events use)
  int64_t end_ns;
  int64_t queued_ns;  // when the host queued it (unix time)
  int32_t host_thread;
  uint64_t correlation;
  bool skipped;
  double flops;
  double bytes;
  // The engine its flops are estimated on: "tensor_bf16", "tensor_fp32",
  // "vector"; "" when it has no flops. The host's, as the estimate used it.
  std::string engine;
  int element_bytes;  // the size of the dtype its flops are in
  // An adaptive-eager item (its children are the eager ops it ran): the id
  // of the repeated sequence it replays (or part of); 0 for other items.
  uint64_t adaptive_sequence;
  int64_t estimate_ns;  // -1: no estimate
  // estimate_ns's parts (compute + dma + latency - overlap); has_parts false
  // when the estimate has none (an NKI kernel's cost model, no estimate).
  neuron_rt::EstimateParts parts;
  bool has_parts;
  int64_t estimate_start_ns;
  // Its length on the estimated track: its estimate, or, for a step of an
  // item estimated below the sum of its steps (a pipeline), its estimate
  // scaled into the item's span; for an op inside a fused step, its share
  // of the step's span.
  int64_t estimate_span_ns = 0;
  // The item this one is a child of (-1: none), by position in the list.
  int64_t parent;
  // An op that ran inside a fused step of an adaptive item (tile by tile,
  // with the step's other ops): that step's index in the list; -1 otherwise.
  // Its estimate is what it would cost alone; the fused step's is the cost
  // (the op is not added to its item's). Its start and end are its share of
  // the step's measured span, in proportion to its estimate; its estimated
  // start is inside the step's estimated span, likewise.
  int64_t fused_into = -1;
  std::string detail;  // "key=value;..."
};

// Converts a session's records (steady clock) into items (unix clock), with
// estimates and estimated start times; children follow their items.
std::vector<DeviceItem> buildTimeline(std::vector<neuron_rt::TraceRecord> recs,
                                      int64_t steady_to_unix_ns);

// The model estimates are made with for one device (a logical core): the
// target's NeuronCore model for the runtime's logical-core size.
neuron_rt::TrainiumModel deviceModel();
// The NeuronCores one device spans on the target (1 on a generation without
// logical cores).
int physicalCoresPerDevice();

// The offset from the steady clock the runtime uses to unix time.
int64_t steadyToUnixOffsetNs();

// The items of the last finished profiling session (Python: the tables).
const std::vector<DeviceItem>& lastSessionItems();
void setLastSessionItems(std::vector<DeviceItem> items);

}  // namespace torch_neuronx::profiler
