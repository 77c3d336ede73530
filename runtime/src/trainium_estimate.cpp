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
  m.physical_cores = 1;
  m.tensor_bf16_flops_per_ns = s.tensor_bf16_tflops * 1e3 / cores;
  m.tensor_fp32_flops_per_ns = s.tensor_fp32_tflops * 1e3 / cores;
  m.tensor_fp8_flops_per_ns = m.tensor_bf16_flops_per_ns;
  // The Vector and Scalar engines side by side, both counted at the Vector
  // engine's clock.
  m.vector_elems_per_ns = 2 * kLanes * s.vector_ghz;
  m.hbm_bytes_per_ns = s.hbm_gb_per_s / cores;  // GB/s = bytes/ns
  m.link_bytes_per_ns = s.link_gb_per_s / cores;
  m.fixed_ns = s.dma_latency_ns;
  m.hop_latency_ns = s.hop_latency_ns;
  m.launch_ns = 0;
  m.pe_rows = 128;
  m.pe_cols = 128;
  m.moving_free = 512;
  m.dma_fixed_bytes = 0;
  m.chip_link_bytes_per_ns = s.link_gb_per_s;
  m.host_link_bytes_per_ns = s.link_gb_per_s;
  m.chips_per_host = 16;
  m.chip_hop_latency_ns = s.hop_latency_ns;
  m.host_hop_latency_ns = s.hop_latency_ns;
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

double tensorPeak(int element_bytes, const TrainiumModel& m) {
  // fp32 matmuls run at a quarter of the rate (4 passes per instruction).
  if (element_bytes >= 4) return m.tensor_fp32_flops_per_ns;
  return m.tensor_bf16_flops_per_ns;
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
  out.physical_cores = m.physical_cores * physical_cores;
  out.tensor_bf16_flops_per_ns *= k;
  out.tensor_fp32_flops_per_ns *= k;
  out.tensor_fp8_flops_per_ns *= k;
  out.vector_elems_per_ns *= k;
  out.hbm_bytes_per_ns *= k;
  out.link_bytes_per_ns *= k;
  return out;
}

const char* engineName(double flops, bool tensor_engine, int element_bytes) {
  if (flops <= 0) return "";
  if (!tensor_engine) return "vector";
  return element_bytes >= 4 ? "tensor_fp32" : "tensor_bf16";
}

EstimateParts estimateItem(const ItemWork& w, const TrainiumModel& m) {
  EstimateParts p;
  if (w.tensor_engine)
    p.compute_ns = w.flops / tensorPeak(w.element_bytes, m);
  else
    p.compute_ns = w.flops / m.vector_elems_per_ns;
  p.dma_ns = w.bytes / m.hbm_bytes_per_ns;
  p.latency_ns = m.fixed_ns;
  p.overlap_ns = std::min(p.compute_ns, p.dma_ns);
  return p;
}

EstimateParts programEstimate(const std::vector<EstimateParts>& steps,
                              const TrainiumModel& m) {
  (void)m;
  EstimateParts p;
  for (const EstimateParts& s : steps) p += s;
  return p;
}

int64_t roundedNs(const EstimateParts& p) {
  return static_cast<int64_t>(std::llround(std::max(p.totalNs(), 0.0)));
}

int64_t rooflineNs(double flops, double bytes, bool tensor_engine,
                   int element_bytes, const TrainiumModel& m) {
  ItemWork w;
  w.flops = flops;
  w.bytes = bytes;
  w.tensor_engine = tensor_engine;
  w.element_bytes = element_bytes;
  return roundedNs(estimateItem(w, m));
}

namespace {

struct ShapeName {
  CollectiveShape shape;
  const char* name;
};
constexpr ShapeName kShapeNames[] = {
    {CollectiveShape::kAllReduce, "allreduce"},
    {CollectiveShape::kAllGather, "allgather"},
    {CollectiveShape::kReduceScatter, "reducescatter"},
    {CollectiveShape::kAllToAll, "alltoall"},
    {CollectiveShape::kBroadcast, "broadcast"},
    {CollectiveShape::kReduce, "reduce"},
    {CollectiveShape::kPointToPoint, "p2p"},
    {CollectiveShape::kBarrier, "barrier"},
};

}  // namespace

CollectiveShape parseCollectiveShape(const std::string& kind) {
  std::string valid;
  for (const ShapeName& s : kShapeNames) {
    if (kind == s.name) return s.shape;
    valid += valid.empty() ? "" : ", ";
    valid += s.name;
  }
  throw Error(Status::kInvalidArgument,
              "unknown collective '" + kind + "' (valid: " + valid + ")");
}

const char* collectiveShapeName(CollectiveShape shape) {
  for (const ShapeName& s : kShapeNames)
    if (s.shape == shape) return s.name;
  return "";
}

EstimateParts collectiveEstimate(CollectiveShape shape, double bytes,
                                 const std::vector<int>& global_ranks,
                                 const TrainiumModel& m,
                                 CollectivePlacement placement) {
  (void)placement;
  const double n = std::max<double>(global_ranks.size(), 1);
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
  EstimateParts p;
  p.dma_ns = sent / m.link_bytes_per_ns;
  p.latency_ns = hops * m.hop_latency_ns + m.fixed_ns;
  return p;
}

int64_t collectiveNs(CollectiveShape shape, double bytes, int ranks,
                     const TrainiumModel& m) {
  std::vector<int> group(std::max(ranks, 1));
  for (int r = 0; r < static_cast<int>(group.size()); ++r) group[r] = r;
  return roundedNs(collectiveEstimate(shape, bytes, group, m));
}

}  // namespace neuron_rt
