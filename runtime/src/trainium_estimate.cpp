#include "neuron_runtime/trainium_estimate.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>

namespace neuron_rt {

// Trainium2: 667 dense bf16 TFLOPS, 181 fp32 TFLOPS, 2.9 TB/s HBM and
// 1.28 TB/s of NeuronLink per chip of 8 NeuronCore-v3; engines at the NKI
// cost model's clocks (Vector 0.96 GHz x 128 lanes, Scalar alongside).
const TrainiumModel& trn2Model() {
  static const TrainiumModel m{"trn2",         667e3 / 8,  181e3 / 8,
                               2 * 128 * 0.96, 2900.0 / 8, 1280.0 / 8,
                               2000.0,         2000.0};
  return m;
}

// Trainium1: 190 bf16 TFLOPS, 47.5 fp32 TFLOPS, 820 GB/s HBM and 384 GB/s of
// NeuronLink-v2 per chip of 2 NeuronCore-v2; Vector engine at 1.12 GHz.
const TrainiumModel& trn1Model() {
  static const TrainiumModel m{"trn1",    190e3 / 2, 47.5e3 / 2, 2 * 128 * 1.12,
                               820.0 / 2, 384.0 / 2, 2000.0,     2000.0};
  return m;
}

namespace {

std::atomic<const TrainiumModel*>& selected() {
  static std::atomic<const TrainiumModel*> m{[] {
    const char* env = std::getenv("TORCH_NEURONX_PROFILE_TARGET");
    if (env && std::string(env) == "trn1") return &trn1Model();
    return &trn2Model();
  }()};
  return m;
}

}  // namespace

const TrainiumModel& trainiumModel() {
  return *selected().load(std::memory_order_relaxed);
}

bool setTrainiumTarget(const std::string& name) {
  if (name == "trn2")
    selected().store(&trn2Model());
  else if (name == "trn1")
    selected().store(&trn1Model());
  else
    return false;
  return true;
}

TrainiumModel logicalCoreModel(const TrainiumModel& m, int physical_cores) {
  TrainiumModel out = m;
  if (m.name == "trn1" || physical_cores <= 1) return out;
  const double k = physical_cores;
  out.tensor_bf16_flops_per_ns *= k;
  out.tensor_fp32_flops_per_ns *= k;
  out.vector_elems_per_ns *= k;
  out.hbm_bytes_per_ns *= k;
  out.link_bytes_per_ns *= k;
  return out;
}

int64_t rooflineNs(double flops, double bytes, bool tensor_engine,
                   int element_bytes, const TrainiumModel& m) {
  double compute_ns = 0;
  if (tensor_engine) {
    // fp32 matmuls run at a quarter of the rate (4 passes per instruction).
    const double peak = element_bytes >= 4 ? m.tensor_fp32_flops_per_ns
                                           : m.tensor_bf16_flops_per_ns;
    compute_ns = flops / peak;
  } else {
    compute_ns = flops / m.vector_elems_per_ns;
  }
  const double memory_ns = bytes / m.hbm_bytes_per_ns;
  return static_cast<int64_t>(
      std::llround(std::max(compute_ns, memory_ns) + m.fixed_ns));
}

int64_t collectiveNs(CollectiveShape shape, double bytes, int ranks,
                     const TrainiumModel& m) {
  const double n = std::max(ranks, 1);
  double sent = 0;  // bytes each rank puts on its link
  double hops = 0;
  switch (shape) {
    case CollectiveShape::kAllReduce:
      sent = 2 * (n - 1) / n * bytes;
      hops = 2 * (n - 1);
      break;
    case CollectiveShape::kAllGather:
    case CollectiveShape::kReduceScatter:
    case CollectiveShape::kAllToAll:
      sent = (n - 1) / n * bytes;
      hops = n - 1;
      break;
    case CollectiveShape::kBroadcast:
    case CollectiveShape::kReduce:
      sent = bytes;
      hops = std::ceil(std::log2(n));
      break;
    case CollectiveShape::kPointToPoint:
      sent = bytes;
      hops = 1;
      break;
    case CollectiveShape::kBarrier:
      hops = 2 * std::ceil(std::log2(n));
      break;
  }
  if (n <= 1) hops = 0;
  return static_cast<int64_t>(std::llround(
      sent / m.link_bytes_per_ns + hops * m.hop_latency_ns + m.fixed_ns));
}

}  // namespace neuron_rt
