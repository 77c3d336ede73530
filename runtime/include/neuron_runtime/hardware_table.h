// The Trainium generations the estimates model, in one table: the figures the
// profiler's roofline (trainium_estimate.h) and the NKI cost model
// (nki/cost_model.h) are made from. Everything else names a generation by
// its Target; a target's name ("trn2") is parsed in one place, parseTarget().
//
// Published figures are the vendor's numbers with their source beside each
// in hardware_table.cpp; the model figures have no published value and are
// marked so, with their reasoning. The estimates take a core's tensor
// engine as its published per-core figure and a core's memory bandwidth as
// its share of the chip's HBM (at most its DMA engines' peak).
#pragma once

#include <string>

namespace neuron_rt {

enum class Target {
  kTrn1,  // Trainium (Trn1): NeuronCore-v2
  kTrn2,  // Trainium2 (Trn2): NeuronCore-v3
  kTrn3,  // Trainium3 (Trn3): NeuronCore-v4
};
constexpr int kTargets = 3;
// The generation the simulated chips are and the estimates default to.
constexpr Target kDefaultTarget = Target::kTrn2;

struct HardwareSpec {
  Target target;
  const char*
      name;  // "trn2": what target= and TORCH_NEURONX_PROFILE_TARGET take
  const char* chip;  // "Trainium2"
  const char* core;  // "NeuronCore-v3"
  int cores_per_chip;
  // Physical cores can be paired into one logical core (LNC=2).
  bool logical_cores;

  // Per chip, published.
  double tensor_bf16_tflops;  // dense BF16/FP16
  double tensor_fp32_tflops;
  double tensor_fp8_tflops;  // dense FP8 (cFP8 / MXFP8)
  double hbm_gb_per_s;
  double link_gb_per_s;  // NeuronLink, chip to chip
  int cc_cores;          // collective-communication cores

  // Per NeuronCore, published: the tensor engine (the estimates' peak, the
  // 128 x 128 PE array at the Tensor clock), on-chip SBUF, DMA engines.
  double core_tensor_bf16_tflops;
  double core_tensor_fp32_tflops;
  double core_tensor_fp8_tflops;
  double sbuf_mib;
  int dma_engines;             // per NeuronCore
  double dma_engine_gb_per_s;  // each engine's peak

  // Engine clocks, published (the NKI architecture guides).
  double tensor_ghz;
  double vector_ghz;
  double scalar_ghz;
  double gpsimd_ghz;

  // The instance (one host), published: its chips and its EFA bandwidth.
  const char* instance;
  int chips_per_host;
  double efa_gbps;  // per host, gigabits per second

  // Published approximately: a DMA transfer's start (descriptor setup,
  // semaphores, "~1300 ns cross-engine", the NKI DMA bandwidth guide).
  double dma_start_ns;

  // Model figures: no published value; each is reasoned beside its value in
  // hardware_table.cpp.
  double dma_latency_ns;          // the NKI cost model's DMA fixed cost
  double dma_issue_ns;            // descriptor generation per DMA instruction
  double dma_half_payload_bytes;  // per-partition payload at half the peak
  double launch_ns;               // an eager op's launch on the device
  double min_matmul_cycles;       // a matmul instruction's minimum
  double cc_gb_per_s;             // a chip's collective throughput
  double collective_fixed_ns;     // a collective's start and finish
  double hop_latency_ns;          // a collective step within a chip
  double link_hop_latency_ns;     // a step between chips (NeuronLink)
  double efa_hop_latency_ns;      // a step between hosts (EFA)
  // A collective whose group spans hosts starts and finishes through the
  // hosts' proxies: its fixed cost replaces collective_fixed_ns, and is
  // higher from efa_large_message_bytes on (the runtime's other algorithm).
  double efa_collective_fixed_ns;
  double efa_collective_fixed_large_ns;
  double efa_large_message_bytes;
};

const HardwareSpec& hardwareSpec(Target target);
inline const char* targetName(Target target) {
  return hardwareSpec(target).name;
}
// The valid names in Target order: "trn1, trn2, trn3".
std::string targetNames();
// The target named `name`. Throws neuron_rt::Error(kInvalidArgument):
// "unknown target 'trn9' (valid: trn1, trn2, trn3)".
Target parseTarget(const std::string& name);

}  // namespace neuron_rt
