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
  // The published per-core peaks (hardware_table.cpp says why not the
  // chip's over its cores).
  m.tensor_bf16_flops_per_ns = s.core_tensor_bf16_tflops * 1e3;
  m.tensor_fp32_flops_per_ns = s.core_tensor_fp32_tflops * 1e3;
  m.tensor_fp8_flops_per_ns = s.core_tensor_fp8_tflops * 1e3;
  m.tensor_ghz = s.tensor_ghz;
  m.pe_rows = 128;  // [nki-v2..v4]: the 128 x 128 PE array
  m.pe_cols = 128;
  m.moving_free = 512;  // [nki-v2..v4]: a moving tile of up to 512 columns
  m.min_matmul_cycles = s.min_matmul_cycles;
  // The Vector and Scalar engines side by side, each at its own clock.
  m.vector_elems_per_ns = kLanes * (s.vector_ghz + s.scalar_ghz);
  // GB/s = bytes/ns: the core's share of HBM, at most its DMA engines'.
  m.hbm_bytes_per_ns =
      std::min(s.hbm_gb_per_s / cores, s.dma_engines * s.dma_engine_gb_per_s);
  m.dma_start_ns = s.dma_start_ns;
  m.dma_half_payload_bytes = s.dma_half_payload_bytes;
  m.launch_ns = s.launch_ns;
  m.fixed_ns = s.launch_ns + s.dma_start_ns;
  m.link_bytes_per_ns = s.link_gb_per_s / cores;
  m.cc_bytes_per_ns = s.cc_gb_per_s;
  m.chip_link_bytes_per_ns = s.link_gb_per_s;
  m.host_link_bytes_per_ns = s.efa_gbps / 8;
  m.cores_per_chip = s.cores_per_chip;
  m.chips_per_host = s.chips_per_host;
  m.collective_fixed_ns = s.collective_fixed_ns;
  m.hop_latency_ns = s.hop_latency_ns;
  m.link_hop_latency_ns = s.link_hop_latency_ns;
  m.efa_hop_latency_ns = s.efa_hop_latency_ns;
  m.efa_collective_fixed_ns = s.efa_collective_fixed_ns;
  m.efa_collective_fixed_large_ns = s.efa_collective_fixed_large_ns;
  m.efa_large_message_bytes = s.efa_large_message_bytes;
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

// The tensor engine's peak for a dtype of `element_bytes`: fp32 takes four
// passes (the published fp32 figure is a quarter of bf16's), fp8 runs at its
// own published rate.
double tensorPeak(int element_bytes, const TrainiumModel& m) {
  if (element_bytes >= 4) return m.tensor_fp32_flops_per_ns;
  if (element_bytes == 1) return m.tensor_fp8_flops_per_ns;
  return m.tensor_bf16_flops_per_ns;
}

// PE-array cycles of (m x k) @ (k x n) with the (k x m) operand stationary:
// a stationary tile of up to pe_rows x pe_cols per (k, m) tile pair, the
// moving operand streamed through it in chunks of up to moving_free
// columns, one column a cycle, each instruction at least min cycles.
double matmulCycles(double rows, double k, double cols,
                    const TrainiumModel& m) {
  const double k_tiles = std::ceil(k / m.pe_rows);
  const double m_tiles = std::ceil(rows / m.pe_cols);
  const double full = std::floor(cols / m.moving_free);
  const double rest = cols - full * m.moving_free;
  const double per_pair =
      full * std::max<double>(m.moving_free, m.min_matmul_cycles) +
      (rest > 0 ? std::max(rest, m.min_matmul_cycles) : 0.0);
  return k_tiles * m_tiles * per_pair;
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
  if (element_bytes >= 4) return "tensor_fp32";
  if (element_bytes == 1) return "tensor_fp8";
  return "tensor_bf16";
}

double matmulNs(const MatmulShape& s, int element_bytes,
                const TrainiumModel& m) {
  if (s.batch <= 0 || s.m <= 0 || s.k <= 0 || s.n <= 0) return 0;
  // The compiler may make either operand stationary (C^T = B^T A^T): the
  // cheaper orientation.
  const double cycles =
      std::min(matmulCycles(s.m, s.k, s.n, m), matmulCycles(s.n, s.k, s.m, m));
  // A cycle of the whole array is 2 x pe_rows x pe_cols flops; at the
  // published peak for the dtype (its passes, its LNC) that many flops take
  // this long.
  const double flops_per_cycle = 2.0 * m.pe_rows * m.pe_cols;
  return s.batch * cycles * flops_per_cycle / tensorPeak(element_bytes, m);
}

double dmaEfficiency(double payload_bytes, const TrainiumModel& m) {
  if (payload_bytes <= 0) return 1;
  return payload_bytes / (payload_bytes + m.dma_half_payload_bytes);
}

double transferNs(const Transfer& t, const TrainiumModel& m) {
  if (t.bytes <= 0) return 0;
  // Spread over the 128 partitions (fewer when it has fewer elements); a
  // strided tensor's rows are its contiguous runs.
  double partitions = m.pe_rows;
  if (t.element_bytes > 0)
    partitions = std::min(partitions,
                          std::max(1.0, std::ceil(t.bytes / t.element_bytes)));
  double payload = t.bytes / partitions;
  if (t.row_bytes > 0) payload = std::min(payload, t.row_bytes);
  return t.bytes / (m.hbm_bytes_per_ns * dmaEfficiency(payload, m));
}

EstimateParts estimateItem(const ItemWork& w, const TrainiumModel& m) {
  EstimateParts p;
  // Compute: matmuls in whole tiles; other tensor-engine flops at the peak;
  // elementwise work on the vector engines.
  if (w.tensor_engine && !w.matmuls.empty()) {
    for (const MatmulShape& s : w.matmuls)
      p.compute_ns += matmulNs(s, w.element_bytes, m);
  } else if (w.tensor_engine) {
    p.compute_ns = w.flops / tensorPeak(w.element_bytes, m);
  } else {
    p.compute_ns = w.flops / m.vector_elems_per_ns;
  }
  // DMA: each transfer at its payload's efficiency.
  if (w.transfers.empty()) {
    p.dma_ns = transferNs(Transfer{w.bytes, 0}, m);
  } else {
    for (const Transfer& t : w.transfers) p.dma_ns += transferNs(t, m);
  }
  // Latency: the launch of an eager op, the first DMA's start.
  p.latency_ns =
      (w.launch ? m.launch_ns : 0.0) + (p.dma_ns > 0 ? m.dma_start_ns : 0.0);
  // Overlap: the item runs in tiles of pe_rows x moving_free elements,
  // double-buffered: tile i's compute under tile i+1's load and tile i-1's
  // store. All but one tile's share of the shorter side hides; one tile
  // (nothing to overlap with) hides nothing.
  const double tile_bytes = static_cast<double>(m.pe_rows) * m.moving_free *
                            std::max(w.element_bytes, 1);
  const double tiles = std::max(1.0, std::ceil(w.bytes / tile_bytes));
  p.overlap_ns = std::min(p.compute_ns, p.dma_ns) * (tiles - 1) / tiles;
  return p;
}

EstimateParts programEstimate(const std::vector<EstimateParts>& steps,
                              const TrainiumModel& m) {
  // A compiled program is one launch whose steps the compiler schedules as
  // a pipeline: the next steps' loads run on the DMA queues while the
  // current step computes, so across the program compute and DMA overlap as
  // far as the shorter of the two (a roofline over the whole program), and
  // only one DMA start is exposed (the first; the later ones were issued
  // ahead). The steps' own launches (an extern eager op's) are the
  // program's one launch.
  EstimateParts p;
  for (const EstimateParts& s : steps) {
    p.compute_ns += s.compute_ns;
    p.dma_ns += s.dma_ns;
  }
  p.latency_ns = m.launch_ns + (p.dma_ns > 0 ? m.dma_start_ns : 0.0);
  p.overlap_ns = std::min(p.compute_ns, p.dma_ns);
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

namespace {

// The tier a step between two global ranks crosses: 0 within a chip, 1
// between chips of a host (NeuronLink), 2 between hosts (EFA).
struct Placement {
  int ranks_per_chip;
  int chips_per_host;
  int chip(int r) const { return r / ranks_per_chip; }
  int host(int r) const { return chip(r) / chips_per_host; }
  int tier(int a, int b) const {
    if (host(a) != host(b)) return 2;
    return chip(a) != chip(b) ? 1 : 0;
  }
};

double hopNs(int tier, const TrainiumModel& m) {
  switch (tier) {
    case 0:
      return m.hop_latency_ns;
    case 1:
      return m.link_hop_latency_ns;
    default:
      return m.efa_hop_latency_ns;
  }
}

}  // namespace

EstimateParts collectiveEstimate(CollectiveShape shape, double bytes,
                                 const std::vector<int>& global_ranks,
                                 const TrainiumModel& m,
                                 CollectivePlacement placement) {
  const int n = static_cast<int>(global_ranks.size());
  EstimateParts p;
  p.latency_ns = m.collective_fixed_ns;
  if (n <= 1) return p;  // nothing to move: its start and finish
  const int logical_per_chip =
      std::max(1, m.cores_per_chip / std::max(1, m.physical_cores));
  const Placement where{placement.ranks_per_chip > 0 ? placement.ranks_per_chip
                                                     : logical_per_chip,
                        placement.chips_per_host > 0
                            ? placement.chips_per_host
                            : std::max(1, m.chips_per_host)};
  const auto& r = global_ranks;

  // The ring in group order: the slowest tier any of its edges crosses, and
  // the most ranks of the group on one chip (they share its CC cores).
  int ring_tier = 0;
  for (int i = 0; i < n; ++i)
    ring_tier = std::max(ring_tier, where.tier(r[i], r[(i + 1) % n]));
  int per_chip = 1;
  {
    std::vector<int> chips;
    for (int x : r) chips.push_back(where.chip(x));
    std::sort(chips.begin(), chips.end());
    for (size_t i = 0, j = 0; i < chips.size(); i = j) {
      while (j < chips.size() && chips[j] == chips[i]) ++j;
      per_chip = std::max(per_chip, static_cast<int>(j - i));
    }
  }
  // A rank's ring bandwidth: its share of its chip's collective throughput,
  // at most what the slowest link the ring crosses carries (NeuronLink: a
  // chip's links out, half its bidirectional figure; EFA: the host's).
  double bw = m.cc_bytes_per_ns / per_chip;
  if (ring_tier >= 1) bw = std::min(bw, m.chip_link_bytes_per_ns / 2);
  if (ring_tier >= 2) bw = std::min(bw, m.host_link_bytes_per_ns);
  // A group across hosts: the fixed cost nccom-test publishes for two
  // hosts (hardware_table.cpp), far above the in-host one.
  if (ring_tier >= 2)
    p.latency_ns = bytes < m.efa_large_message_bytes
                       ? m.efa_collective_fixed_ns
                       : m.efa_collective_fixed_large_ns;

  // Steps: a ring's (every step as slow as its slowest edge) or recursive
  // doubling-halving's (step i between partners 2^i apart in group order,
  // each at its own tier), whichever is shorter: the runtime picks the ring
  // for large messages and RDH for small ones.
  double rdh_phase = 0;  // one pass of recursive doubling
  for (int d = 1; d < n; d *= 2) {
    int t = 0;
    for (int j = 0; j < n; ++j) {
      const int partner = j ^ d;
      if (partner < n) t = std::max(t, where.tier(r[j], r[partner]));
    }
    rdh_phase += hopNs(t, m);
  }
  const double ring_hop = hopNs(ring_tier, m);
  double sent = 0;  // bytes each rank puts on its link
  double steps_ns = 0;
  const double nn = n;
  switch (shape) {
    case CollectiveShape::kAllReduce:
      sent = 2 * (nn - 1) / nn * bytes;
      steps_ns = std::min(2 * (nn - 1) * ring_hop, 2 * rdh_phase);
      break;
    case CollectiveShape::kAllGather:
    case CollectiveShape::kReduceScatter:
    case CollectiveShape::kAllToAll:
      sent = (nn - 1) / nn * bytes;
      steps_ns = std::min((nn - 1) * ring_hop, rdh_phase);
      break;
    case CollectiveShape::kBroadcast:
    case CollectiveShape::kReduce:
      sent = bytes;
      steps_ns = rdh_phase;  // a tree: log2(n) levels
      break;
    case CollectiveShape::kPointToPoint:
      sent = bytes;
      steps_ns = ring_hop;
      break;
    case CollectiveShape::kBarrier:
      steps_ns = 2 * rdh_phase;
      break;
  }
  p.dma_ns = sent / bw;
  p.latency_ns += steps_ns;
  return p;
}

int64_t collectiveNs(CollectiveShape shape, double bytes, int ranks,
                     const TrainiumModel& m) {
  std::vector<int> group(std::max(ranks, 1));
  for (int r = 0; r < static_cast<int>(group.size()); ++r) group[r] = r;
  return roundedNs(collectiveEstimate(shape, bytes, group, m));
}

}  // namespace neuron_rt
