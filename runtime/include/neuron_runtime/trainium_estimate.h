// An estimate of how long a device item would take on a real NeuronCore:
// the profiler's "estimated Trainium time" for items other than NKI kernels
// (those have the simulator's per-engine cost model, nki/cost_model.h).
//
// Roofline: an item takes the longer of its arithmetic (flops against the
// engine's peak for its dtype) and its memory traffic (bytes against the
// core's share of HBM bandwidth), plus a fixed latency (DMA setup and
// completion, the cost model's figure). Collectives: a ring over the ranks
// (bytes each rank sends against the link bandwidth, plus a latency per
// hop). The constants are the hardware table's per-chip figures divided by
// the chip's cores (hardware_table.h); docs/profiling.md lists them.
#pragma once

#include <cstdint>
#include <string>

#include "neuron_runtime/hardware_table.h"

namespace neuron_rt {

struct TrainiumModel {
  Target target;
  std::string name;                 // targetName(target): "trn2"
  double tensor_bf16_flops_per_ns;  // per core, dense bf16/fp16
  double tensor_fp32_flops_per_ns;  // per core
  double vector_elems_per_ns;       // Vector/Scalar engines, elementwise
  double hbm_bytes_per_ns;          // per core
  double link_bytes_per_ns;         // collective bandwidth per core
  double fixed_ns;                  // per item: DMA setup and completion
  double hop_latency_ns;            // per ring step of a collective
};

// The model of one NeuronCore of `target`.
const TrainiumModel& trainiumModel(Target target);
// The model estimates are made with: TORCH_NEURONX_PROFILE_TARGET (a target
// name, kDefaultTarget when unset), or the last setTrainiumTarget(). An
// unknown name in the variable throws neuron_rt::Error(kInvalidConfig);
// Runtime::get() reads it with the rest of the environment.
const TrainiumModel& trainiumModel();
void setTrainiumTarget(Target target);
// The model of a logical core of `physical_cores` NeuronCores (LNC=2 on
// Trn2 pairs two): engines and bandwidth add up, latencies stay. A generation
// without logical cores (trn1) has its model returned as it is.
TrainiumModel logicalCoreModel(const TrainiumModel& m, int physical_cores);

// An op's estimate: flops on the systolic array (tensor_engine) or the
// vector engines, `bytes` of HBM traffic, in a dtype of `element_bytes`.
int64_t rooflineNs(double flops, double bytes, bool tensor_engine,
                   int element_bytes, const TrainiumModel& m = trainiumModel());

enum class CollectiveShape {
  kAllReduce,      // reduce-scatter then all-gather
  kAllGather,      // bytes: the gathered result
  kReduceScatter,  // bytes: the input
  kAllToAll,
  kBroadcast,
  kReduce,
  kPointToPoint,  // send / recv
  kBarrier,
};
// `bytes`: the collective's tensor size on one rank; `ranks`: group size.
int64_t collectiveNs(CollectiveShape shape, double bytes, int ranks,
                     const TrainiumModel& m = trainiumModel());

}  // namespace neuron_rt
