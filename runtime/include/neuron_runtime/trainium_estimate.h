// An estimate of how long a device item would take on a real NeuronCore:
// the profiler's "estimated Trainium time" for items other than NKI kernels
// (those have the simulator's per-engine cost model, nki/cost_model.h).
//
// An item's estimate has four parts (EstimateParts, trace.h):
//   estimate = compute + dma + latency - overlap
// compute: the engines' time (a matmul on the tensor engine, counted in whole
// PE-array tiles; elementwise work on the vector engines); dma: its HBM
// traffic through the DMA queues, each transfer at an efficiency that rises
// with its size; latency: the fixed costs (an eager op's launch, a DMA's
// setup and completion, a collective's steps); overlap: the part of compute
// and DMA that run at once (tiles pipeline: all but the first tile's load
// and the last tile's store hide under compute). Collectives: a ring over
// the group's ranks on the slowest link it crosses (within a chip, NeuronLink
// between chips, EFA between hosts), plus a latency per step of that tier.
// Every constant is in the hardware table (hardware_table.h) with its
// source; docs/profiling.md "Estimated Trainium time" explains the rules.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "neuron_runtime/hardware_table.h"
#include "neuron_runtime/trace.h"

namespace neuron_rt {

struct TrainiumModel {
  Target target;
  std::string name;    // targetName(target): "trn2"
  int physical_cores;  // NeuronCores this model spans (its LNC)
  // The tensor engine, per model (a logical core: its cores' together).
  double tensor_bf16_flops_per_ns;  // dense bf16/fp16: the published peak
  double tensor_fp32_flops_per_ns;
  double tensor_fp8_flops_per_ns;
  double tensor_ghz;
  int pe_rows;               // contraction (partition) dim of the PE array: 128
  int pe_cols;               // stationary tile width: 128
  int moving_free;           // moving tile's free size: up to 512
  double min_matmul_cycles;  // a matmul instruction's minimum
  // Elementwise work: the Vector and Scalar engines side by side, 128 lanes
  // each at its own clock.
  double vector_elems_per_ns;
  // Memory: the core's share of HBM, at most its DMA engines' peak.
  double hbm_bytes_per_ns;
  double dma_start_ns;            // a DMA transfer's start, once per item
  double dma_half_payload_bytes;  // payload per partition at half the peak
  double launch_ns;               // an eager item's launch
  // An eager item's fixed cost: launch_ns + dma_start_ns (what the
  // profiler's summary calls its latency).
  double fixed_ns;
  // Collectives.
  double link_bytes_per_ns;  // the chip's NeuronLink over its cores (x LNC)
  double cc_bytes_per_ns;    // a chip's collective throughput
  double chip_link_bytes_per_ns;  // a chip's NeuronLink
  double host_link_bytes_per_ns;  // a host's EFA
  int cores_per_chip;             // physical
  int chips_per_host;
  double collective_fixed_ns;
  double hop_latency_ns;                 // a step within a chip
  double link_hop_latency_ns;            // a step between chips
  double efa_hop_latency_ns;             // a step between hosts
  double efa_collective_fixed_ns;        // a group across hosts: small
  double efa_collective_fixed_large_ns;  // ... from efa_large_message_bytes
  double efa_large_message_bytes;
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

// A matrix product [batch] (m x k) @ (k x n) on the tensor engine.
struct MatmulShape {
  double batch = 1;
  double m = 0;
  double k = 0;
  double n = 0;
};

// One DMA transfer: `bytes` of a tensor spread over up to 128 partitions
// (one element at least on each used), moved as each partition's payload,
// at most `row_bytes` contiguous bytes at a time (a strided tensor's
// contiguous run).
struct Transfer {
  double bytes = 0;
  double row_bytes = 0;      // 0: contiguous throughout
  double element_bytes = 0;  // 0: unknown (all 128 partitions used)
};

// What an item does, as the model sees it.
struct ItemWork {
  // Tensor-engine flops (2 per multiply-add), or, off the tensor engine,
  // elements through the vector engines.
  double flops = 0;
  double bytes = 0;  // HBM traffic, the sum of `transfers`
  bool tensor_engine = false;
  int element_bytes = 4;  // the dtype the flops are in
  // The matrix products making up `flops` (tile quantisation); when empty a
  // tensor-engine item's flops are taken at the peak.
  std::vector<MatmulShape> matmuls;
  // The item's DMA transfers (an eager op: one per tensor); empty: `bytes`
  // as one contiguous transfer.
  std::vector<Transfer> transfers;
  bool launch = true;  // pays the eager op launch cost (an eager item)
};

// The estimate of one item on `m`.
EstimateParts estimateItem(const ItemWork& w, const TrainiumModel& m);
// A compiled program of `steps` (each estimated alone by estimateItem): one
// launch and one DMA start, its steps pipelined: compute and DMA summed over
// the steps, overlapping as far as the shorter of the two.
EstimateParts programEstimate(const std::vector<EstimateParts>& steps,
                              const TrainiumModel& m);
// The engine estimateItem takes the item's flops to: "tensor_bf16",
// "tensor_fp32", "tensor_fp8" (1-byte dtypes), "vector", or "" when it has
// no flops.
const char* engineName(double flops, bool tensor_engine, int element_bytes);

// The parts of estimateItem, each a rule of its own (docs/profiling.md):
// the tensor engine's time for one matmul in whole PE-array tiles;
double matmulNs(const MatmulShape& s, int element_bytes,
                const TrainiumModel& m);
// the efficiency of a DMA moving `payload` contiguous bytes per partition
// (0..1, rising with the payload);
double dmaEfficiency(double payload_bytes, const TrainiumModel& m);
// the DMA queues' time for one transfer.
double transferNs(const Transfer& t, const TrainiumModel& m);

// An op's estimate from its flops and bytes only (no tile shapes, one
// transfer): estimateItem's total, rounded.
int64_t rooflineNs(double flops, double bytes, bool tensor_engine,
                   int element_bytes, const TrainiumModel& m = trainiumModel());

enum class CollectiveShape {
  kAllReduce,      // bytes: the tensor (on every rank)
  kAllGather,      // bytes: the gathered result
  kReduceScatter,  // bytes: the input (the whole, before scattering)
  kAllToAll,       // bytes: the input
  kBroadcast,      // bytes: the tensor
  kReduce,         // bytes: the tensor
  kPointToPoint,   // send / recv: bytes this rank sends and receives
  kBarrier,        // bytes: ignored
};
// "allreduce", "allgather", "reducescatter", "alltoall", "broadcast",
// "reduce", "p2p", "barrier". Throws Error(kInvalidArgument) naming them.
CollectiveShape parseCollectiveShape(const std::string& kind);
const char* collectiveShapeName(CollectiveShape shape);

// Where a group's ranks sit: rank r on chip r / ranks_per_chip, chip c on
// host c / chips_per_host. 0: the model's (a chip's logical cores at the
// model's LNC; the target's instance's chips).
struct CollectivePlacement {
  int ranks_per_chip = 0;
  int chips_per_host = 0;
};

// A collective of `shape` over the group of `global_ranks` (the ranks of
// the default group, so the topology knows where each one sits).
EstimateParts collectiveEstimate(CollectiveShape shape, double bytes,
                                 const std::vector<int>& global_ranks,
                                 const TrainiumModel& m,
                                 CollectivePlacement placement = {});
// `bytes`: the collective's tensor size on one rank; `ranks`: group size
// (ranks 0..ranks-1); collectiveEstimate's total, rounded.
int64_t collectiveNs(CollectiveShape shape, double bytes, int ranks,
                     const TrainiumModel& m = trainiumModel());

// estimate_ns of a total (rounded to the nanosecond).
int64_t roundedNs(const EstimateParts& p);

}  // namespace neuron_rt
