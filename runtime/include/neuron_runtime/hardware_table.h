// The Trainium generations the estimates model, in one table: the figures the
// profiler's roofline (trainium_estimate.h) and the NKI cost model
// (nki/cost_model.h) are made from. Everything else names a generation by
// its Target; a target's name ("trn2") is parsed in one place, parseTarget().
//
// Published figures are the vendor's per-chip numbers with their source
// beside each in hardware_table.cpp; the model figures (latencies) have no
// published value and are marked so. The estimates divide a chip's figures
// by its cores.
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
  double hbm_gb_per_s;
  double link_gb_per_s;  // NeuronLink, chip to chip

  // Engine clocks, published (the NKI architecture guides).
  double tensor_ghz;
  double vector_ghz;
  double scalar_ghz;
  double gpsimd_ghz;

  // Model figures: no published value (issue 32 calibrates them).
  double dma_latency_ns;  // a DMA's setup and completion; an item's fixed cost
  double dma_issue_ns;    // descriptor generation per DMA instruction
  double hop_latency_ns;  // per ring step of a collective
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
