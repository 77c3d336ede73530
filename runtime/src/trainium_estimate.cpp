#include "neuron_runtime/trainium_estimate.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string>

#include "neuron_runtime/status.h"

namespace neuron_rt {

namespace {

// A lane per SBUF partition: 128 elements per cycle on each engine.
constexpr double kLanes = 128;

TrainiumModel modelOf(const HardwareSpec& s) {
  const double cores = s.cores_per_chip;
  TrainiumModel m;
  m.target = s.target;
  m.name = s.name;
  m.tensor_bf16_flops_per_ns = s.tensor_bf16_tflops * 1e3 / cores;
  m.tensor_fp32_flops_per_ns = s.tensor_fp32_tflops * 1e3 / cores;
  // The Vector and Scalar engines side by side, both counted at the Vector
  // engine's clock.
  m.vector_elems_per_ns = 2 * kLanes * s.vector_ghz;
  m.hbm_bytes_per_ns = s.hbm_gb_per_s / cores;  // GB/s = bytes/ns
  m.link_bytes_per_ns = s.link_gb_per_s / cores;
  m.fixed_ns = s.dma_latency_ns;
  m.hop_latency_ns = s.hop_latency_ns;
  return m;
}

const TrainiumModel* models() {
  static const auto* table = [] {
    auto* t = new TrainiumModel[kTargets];
    for (int k = 0; k < kTargets; ++k)
      t[k] = modelOf(hardwareSpec(static_cast<Target>(k)));
    return t;
  }();
  return table;
}

std::atomic<const TrainiumModel*>& selected() {
  static std::atomic<const TrainiumModel*> m{[] {
    const char* env = std::getenv("TORCH_NEURONX_PROFILE_TARGET");
    if (!env || !*env) return &trainiumModel(kDefaultTarget);
    try {
      return &trainiumModel(parseTarget(env));
    } catch (const Error& e) {
      throw Error(Status::kInvalidConfig,
                  std::string("TORCH_NEURONX_PROFILE_TARGET: ") + e.what());
    }
  }()};
  return m;
}

}  // namespace

const TrainiumModel& trainiumModel(Target target) {
  return models()[static_cast<int>(target)];
}

const TrainiumModel& trainiumModel() {
  return *selected().load(std::memory_order_relaxed);
}

void setTrainiumTarget(Target target) {
  selected().store(&trainiumModel(target));
}

TrainiumModel logicalCoreModel(const TrainiumModel& m, int physical_cores) {
  TrainiumModel out = m;
  if (!hardwareSpec(m.target).logical_cores || physical_cores <= 1) return out;
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
