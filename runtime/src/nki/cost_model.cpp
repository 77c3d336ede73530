#include "neuron_runtime/nki/cost_model.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "neuron_runtime/nki/collective_cost.h"
#include "neuron_runtime/nki/control_flow.h"
#include "neuron_runtime/nki/operands.h"

namespace neuron_rt {
namespace nki {
namespace {

// A region of a buffer as a box: partitions [p0, p1] x free offsets [f0, f1]
// (HBM buffers: one row). Dependencies between instructions are overlaps of
// these boxes; tiles written column block by column block stay independent.
struct Box {
  int64_t p0, p1, f0, f1;
  bool overlaps(const Box& o) const {
    return p0 <= o.p1 && o.p0 <= p1 && f0 <= o.f1 && o.f0 <= f1;
  }
};

Box boxOf(const Program& prog, const Access& a) {
  const Buffer& buf = prog.buffers()[a.buffer];
  const int64_t row = buf.partitions > 0 && buf.elements % buf.partitions == 0
                          ? buf.elements / buf.partitions
                          : buf.elements;
  const int64_t r = std::max<int64_t>(row, 1);
  Box b{a.offset / r, a.offset / r, a.offset % r, a.offset % r};
  for (int d = 0; d < a.ndim; ++d) {
    const int64_t span = a.stride[d] * (a.size[d] - 1);
    if (a.stride[d] != 0 && a.stride[d] % r == 0) {
      (span < 0 ? b.p0 : b.p1) += span / r;
    } else {
      (span < 0 ? b.f0 : b.f1) += span;
    }
  }
  if (b.f0 < 0 || b.f1 >= r) {  // wraps across partitions: whole rows
    b.f0 = 0;
    b.f1 = r - 1;
  }
  return b;
}

struct Event {
  Box box;
  double at;
};

// Recent reads and writes of one buffer; old entries fold into one
// conservative entry so the lists stay short.
struct History {
  std::vector<Event> writes, reads;
};

void record(std::vector<Event>& list, const Box& b, double at) {
  constexpr size_t kMax = 24;
  list.push_back({b, at});
  if (list.size() > kMax) {
    Event merged = list[0];
    for (size_t k = 1; k < list.size() / 2; ++k) {
      merged.box.p0 = std::min(merged.box.p0, list[k].box.p0);
      merged.box.p1 = std::max(merged.box.p1, list[k].box.p1);
      merged.box.f0 = std::min(merged.box.f0, list[k].box.f0);
      merged.box.f1 = std::max(merged.box.f1, list[k].box.f1);
      merged.at = std::max(merged.at, list[k].at);
    }
    list.erase(list.begin(), list.begin() + list.size() / 2);
    list.insert(list.begin(), merged);
  }
}

double readyAfter(const std::vector<Event>& list, const Box& b) {
  double t = 0;
  for (const Event& e : list)
    if (e.at > t && e.box.overlaps(b)) t = e.at;
  return t;
}

int64_t freeElements(const Access& a) {
  // Elements per partition: everything but the leading (partition) dim.
  int64_t n = 1;
  for (int d = 1; d < a.ndim; ++d) n *= a.size[d];
  return n;
}

int64_t dmaBytes(const Program& prog, const Access& a, int64_t& rows) {
  if (a.buffer < 0) return 0;
  const int es = elementSize(prog.buffers()[a.buffer].dtype);
  const int64_t n = a.count();
  if (n == 0) return 0;
  // Contiguous rows: the innermost dims with unit-stride chaining.
  int64_t run = 1, expect = 1;
  for (int d = a.ndim - 1; d >= 0; --d) {
    if (a.size[d] == 1) continue;
    if (a.stride[d] != expect) break;
    run *= a.size[d];
    expect *= a.size[d];
  }
  rows = n / run;
  return n * es;
}

// The core's share of HBM bandwidth over time: reserved up to `busy_until`,
// with the idle gaps before it that later-ready transfers may still fill
// (the most recent ones; older gaps are forgotten to bound the cost).
class DmaBandwidth {
 public:
  double reserve(double ready, double cost) {
    for (size_t k = 0; k < gaps_.size(); ++k) {
      const double s = std::max(gaps_[k].first, ready);
      if (s + cost <= gaps_[k].second) {
        const double gap_end = gaps_[k].second;
        // [begin, s) and [s + cost, end) stay free.
        if (s + cost < gap_end)
          gaps_.insert(gaps_.begin() + static_cast<long>(k) + 1,
                       {s + cost, gap_end});
        if (s > gaps_[k].first) {
          gaps_[k].second = s;
        } else {
          gaps_.erase(gaps_.begin() + static_cast<long>(k));
        }
        if (gaps_.size() > kMaxGaps) gaps_.erase(gaps_.begin());
        return s;
      }
    }
    const double s = std::max(ready, busy_until_);
    if (s > busy_until_) gaps_.push_back({busy_until_, s});
    if (gaps_.size() > kMaxGaps) gaps_.erase(gaps_.begin());
    busy_until_ = s + cost;
    return s;
  }

 private:
  static constexpr size_t kMaxGaps = 64;
  std::vector<std::pair<double, double>> gaps_;  // by start time
  double busy_until_ = 0;
};

// A register operation or branch (control_flow.h): each compute engine's
// sequencer runs it once the memory it reads is written and the registers
// it reads are computed. Returns when the last engine is done.
double timeControlFlow(const Program& prog, const Instruction& in,
                       const CostParameters& p, std::vector<History>& history,
                       double* engine_free, std::vector<double>& reg_ready,
                       Profile& out) {
  auto regReady = [&](double r) {
    const auto k = static_cast<size_t>(r);
    return r >= 0 && k < reg_ready.size() ? reg_ready[k] : 0.0;
  };
  double ready = 0;
  bool memory = false;
  if (in.op == Op::kBranch) {
    if (in.alu0 != Alu::kBypass) ready = regReady(in.keep);
  } else {
    if (in.src[0].buffer >= 0) {
      memory = true;
      ready =
          readyAfter(history[in.src[0].buffer].writes, boxOf(prog, in.src[0]));
    } else if (!(in.flags & kFlagOperand0Imm)) {
      ready = regReady(in.imm[0]);
    }
    if (in.alu0 != Alu::kBypass && !(in.flags & kFlagOperand1Imm))
      ready = std::max(ready, regReady(in.imm[1]));
    if (in.dst.buffer >= 0) {
      memory = true;
      const History& h = history[in.dst.buffer];
      const Box b = boxOf(prog, in.dst);
      ready =
          std::max({ready, readyAfter(h.writes, b), readyAfter(h.reads, b)});
    }
  }
  const double cycles =
      memory ? p.register_memory_cycles : p.sequencer_op_cycles;
  const Engine engines[] = {Engine::kTensor, Engine::kVector, Engine::kScalar,
                            Engine::kGpSimd};
  const double ghz[] = {p.tensor_ghz, p.vector_ghz, p.scalar_ghz, p.gpsimd_ghz};
  double finish = 0;
  for (int k = 0; k < 4; ++k) {
    const int e = static_cast<int>(engines[k]);
    const double cost = cycles / ghz[k];
    engine_free[e] = std::max(engine_free[e], ready) + cost;
    finish = std::max(finish, engine_free[e]);
    out.busy_ns[e] += cost;
  }
  out.instructions[static_cast<int>(in.engine)] += 1;
  if (in.op == Op::kScalar) {
    if (in.keep >= 0) {
      if (reg_ready.size() <= static_cast<size_t>(in.keep))
        reg_ready.resize(static_cast<size_t>(in.keep) + 1, 0.0);
      reg_ready[static_cast<size_t>(in.keep)] = finish;
    }
    if (in.src[0].buffer >= 0)
      record(history[in.src[0].buffer].reads, boxOf(prog, in.src[0]), finish);
    if (in.dst.buffer >= 0)
      record(history[in.dst.buffer].writes, boxOf(prog, in.dst), finish);
  }
  return finish;
}

}  // namespace

namespace {

CostParameters parametersOf(const HardwareSpec& s) {
  CostParameters p;
  p.tensor_ghz = s.tensor_ghz;
  p.vector_ghz = s.vector_ghz;
  p.scalar_ghz = s.scalar_ghz;
  p.gpsimd_ghz = s.gpsimd_ghz;
  p.hbm_bytes_per_ns = s.hbm_gb_per_s / s.cores_per_chip;  // GB/s = bytes/ns
  p.dma_latency_ns = s.dma_latency_ns;
  p.dma_issue_ns = s.dma_issue_ns;
  p.cc_bytes_per_ns_per_core = s.cc_gb_per_s / s.cores_per_chip;
  p.collective_fixed_ns = s.collective_fixed_ns;
  p.link_hop_latency_ns = s.link_hop_latency_ns;
  return p;
}

}  // namespace

const CostParameters& costParameters(neuron_rt::Target target) {
  static const auto* table = [] {
    auto* t = new CostParameters[neuron_rt::kTargets];
    for (int k = 0; k < neuron_rt::kTargets; ++k)
      t[k] = parametersOf(
          neuron_rt::hardwareSpec(static_cast<neuron_rt::Target>(k)));
    return t;
  }();
  return table[static_cast<int>(target)];
}

const CostParameters& defaultCostParameters() {
  return costParameters(neuron_rt::kDefaultTarget);
}

double instructionCost(const Program& prog, const Instruction& in,
                       const CostParameters& p) {
  const auto dtype = [&](const Access& a) {
    return prog.buffers()[a.buffer].dtype;
  };
  const auto space = [&](const Access& a) {
    return a.buffer >= 0 ? prog.buffers()[a.buffer].space : Space::kSbuf;
  };
  // A dtype view's reinterpretation moves nothing on the hardware.
  if (in.op == Op::kRawCopy && in.imm[0] == 1.0) return 0;
  switch (in.engine) {
    case Engine::kDma: {
      int64_t rows_src = 1, rows_dst = 1;
      const int64_t bytes = std::max(dmaBytes(prog, in.src[0], rows_src),
                                     dmaBytes(prog, in.dst, rows_dst));
      int64_t rows = std::max<int64_t>({rows_src, rows_dst, 1});
      double dynamic_ns = 0;
      if (in.op == Op::kDmaDynamic) {
        dynamic_ns = p.dma_dynamic_index_cycles / p.gpsimd_ghz;
        if (in.flags & kFlagVectorOffset) {
          // At least one transfer per index row, and its descriptor.
          const int64_t index_rows = std::max<int64_t>(in.dst.size[0], 1);
          rows = std::max(rows, index_rows);
          dynamic_ns += static_cast<double>(index_rows) *
                        p.dma_descriptor_cycles / p.gpsimd_ghz;
        }
      }
      const int64_t row_bytes = bytes / rows;
      const double effective =
          static_cast<double>(rows) *
          static_cast<double>(std::max(row_bytes, p.dma_efficient_row_bytes));
      return p.dma_issue_ns + dynamic_ns +
             effective / (p.hbm_bytes_per_ns * p.dma_efficiency);
    }
    case Engine::kTensor: {
      double cycles;
      if (in.op == Op::kMxLoadStationary) {
        return 0;  // its load overlaps: counted in the kMatmulMx after it
      } else if (in.op == Op::kMatmulMx) {
        // NKI's MX matmul guide (deep-dives/mxfp-matmul): each PE does four
        // FP8/FP4 multiply-accumulates, so an x4 [K, M] x [K, N] matmul takes
        // the time of a BF16 one of those shapes (4x the contraction: "4x
        // throughput compared to BF16/FP16").
        const double stationary = static_cast<double>(in.dst.size[0]);
        const double moving =
            static_cast<double>(in.src[0].count() / in.src[0].size[0]);
        cycles = std::max(std::min(p.min_ii_cycles, stationary), moving);
      } else if (in.op == Op::kMatmul) {
        // One moving column enters the array per cycle (the stationary load
        // overlaps); fp32 operands take four passes.
        const double rate = dtype(in.src[1]) == DType::kF32 ? 4.0 : 1.0;
        const double stationary = static_cast<double>(in.src[0].size[1]);
        const double moving = static_cast<double>(in.src[1].size[1]);
        cycles = std::max(std::min(p.min_ii_cycles, stationary), moving) * rate;
      } else {
        // Transpose: a matmul of the input against the identity.
        const double P = static_cast<double>(in.src[0].size[0]);
        const double F = static_cast<double>(in.src[0].size[1]);
        cycles = std::max(P, std::min(p.min_ii_cycles, F));
      }
      return cycles / p.tensor_ghz;
    }
    case Engine::kVector:
    case Engine::kScalar:
    case Engine::kGpSimd: {
      // One element per partition per cycle and input stream, over the
      // larger of input and output (a reduction streams its whole input).
      // The search instructions stream their data once, N = the data's
      // elements per partition: max8 and nc_find_index8 "N engine cycles"
      // (NKI ISA reference, "Estimated instruction cost", the pages up to
      // Neuron 2.26; the 8 values are loaded first and not counted), and
      // nc_match_replace8 the same (its page prints "min(MIN_II, N)", read
      // as the max(MIN_II, N) every Vector instruction costs here), each
      // with that MIN_II floor. nonzero_with_count (GpSimd) has no
      // published figure: the GpSimd rule 150 + N, N the source's elements
      // per partition (the eight cores each scan one partition at once).
      // The random instructions (all on the Vector engine, so that they keep
      // program order on the one random state): dropout max(MIN_II, N)
      // cycles for N data elements per partition (NKI ISA reference,
      // nki.isa.dropout, "Estimated instruction cost", the pages up to
      // Neuron 2.26); rand the same over its N output elements (NKI names
      // no engine and gives no figure for nl.rand; the hardware's generator
      // instruction, nisa.rand2, is a Vector one: assumed to stream like
      // any Vector instruction); random_seed, which writes no tile, MIN_II
      // cycles (assumed: no published figure).
      if (in.op == Op::kRandomSeed) {
        const double ghz = in.engine == Engine::kGpSimd   ? p.gpsimd_ghz
                           : in.engine == Engine::kScalar ? p.scalar_ghz
                                                          : p.vector_ghz;
        return p.min_ii_cycles / ghz;
      }
      const bool reduces = in.op == Op::kReduce || in.op == Op::kBnStats ||
                           in.op == Op::kBnAggr || in.op == Op::kMax8 ||
                           in.op == Op::kFindIndex8 ||
                           in.op == Op::kMatchReplace8 ||
                           in.op == Op::kNonzeroWithCount ||
                           // quantize_mx streams its 4F source values per
                           // partition (no published figure: assumed).
                           in.op == Op::kQuantizeMx;
      const double n = static_cast<double>(
          std::max<int64_t>(freeElements(reduces ? in.src[0] : in.dst), 1));
      if (in.engine == Engine::kGpSimd)
        return (p.gpsimd_fixed_cycles + n) / p.gpsimd_ghz;
      if (in.engine == Engine::kScalar)
        return std::max(p.min_ii_cycles, n) / p.scalar_ghz;
      double streams = 1;
      if (in.op == Op::kTensorTensor) {
        // Two SBUF inputs stream one after the other, except bf16
        // add/subtract/multiply; a PSUM input comes on its own port.
        const bool psum_input = space(in.src[0]) == Space::kPsum ||
                                space(in.src[1]) == Space::kPsum;
        const bool fast_bf16 =
            dtype(in.src[0]) == DType::kBF16 &&
            dtype(in.src[1]) == DType::kBF16 &&
            (in.alu0 == Alu::kAdd || in.alu0 == Alu::kSubtract ||
             in.alu0 == Alu::kMultiply);
        streams = psum_input || fast_bf16 ? 1 : 2;
      } else if (in.op == Op::kScan) {
        streams = 2;
      } else if (in.op == Op::kBnAggr) {
        streams = 13.0 / 3.0;
      }
      return std::max(p.min_ii_cycles, n * streams) / p.vector_ghz;
    }
  }
  return 0;
}

Profile estimateCost(const Program& prog, const CostParameters& p,
                     const std::vector<int32_t>* run_path) {
  Profile out;
  const auto& buffers = prog.buffers();
  std::vector<History> history(buffers.size());
  // A logical core of two physical cores (LNC=2: tiles on core 1) runs two
  // sets of engines, each core's DMA queues at its share of the HBM
  // bandwidth. An instruction runs on the core of the tiles it touches (a
  // sendrecv's transfer: the receiving core's); one touching only HBM on
  // core 0. The cores synchronise through their data: what a barrier orders
  // (reads of what the other core wrote to HBM) waits on those writes.
  double engine_free[kMaxCores][kEngines] = {};
  DmaBandwidth dma[kMaxCores];
  // Each rank's collective channel (a multi-rank launch, collective_cost.h).
  DmaBandwidth cc[kMaxCores];
  auto coreOf = [&](const Instruction& in) {
    const Access* accesses[4] = {&in.dst, &in.src[0], &in.src[1], &in.src[2]};
    for (const Access* a : accesses)
      if (a->buffer >= 0 && buffers[a->buffer].space != Space::kHbm)
        return buffers[a->buffer].core;
    // HBM only: the core of its destination's rank (0 but in a multi-rank
    // launch, where each rank's HBM belongs to its first core).
    return in.dst.buffer >= 0 ? buffers[in.dst.buffer].core : 0;
  };
  double end = 0;
  // A program with loops is timed along the instructions a run executes
  // (control_flow.h staticPath), each time it executes them.
  const auto& instructions = prog.instructions();
  std::vector<int32_t> path;
  if (run_path != nullptr) {
    path = *run_path;
  } else if (hasControlFlow(instructions)) {
    path = staticPath(instructions);
  }
  const size_t steps = path.empty() ? instructions.size() : path.size();
  std::vector<double> register_ready;
  for (size_t k = 0; k < steps; ++k) {
    const Instruction& in = instructions[path.empty() ? k : path[k]];
    const int e = static_cast<int>(in.engine);
    const int core = coreOf(in);
    if (isControlFlow(in.op)) {
      // Registers belong to no tile: the record names its core.
      const double c = in.imm[in.op == Op::kScalar ? 3 : 1];
      const int cf_core = c >= 0 && c < kMaxCores ? static_cast<int>(c) : 0;
      end = std::max(end,
                     timeControlFlow(prog, in, p, history, engine_free[cf_core],
                                     register_ready, out));
      continue;
    }
    const double cost = instructionCost(prog, in, p);
    // Ready when what it reads was written, and what it overwrites was read
    // and written by earlier instructions. (An accumulating matmul's read of
    // its destination waits on the destination's writes, as its write does.)
    const OperandRoles roles = operandRoles(in);
    // The side of a dynamic DMA its index moves may touch any row of its
    // buffer: it depends on (and is depended on by) the whole buffer.
    const bool dynamic = in.op == Op::kDmaDynamic;
    const bool dyn_dst = dynamic && (in.flags & kFlagDynamicDst);
    const bool dyn_src = dynamic && !dyn_dst;
    auto box = [&](const Access& a, bool whole) {
      return whole ? Box{0, INT64_MAX / 4, 0, INT64_MAX / 4} : boxOf(prog, a);
    };
    double ready = 0;
    auto reads = [&](const Access& a, bool whole) {
      if (a.buffer < 0 || a.count() == 0) return;
      ready =
          std::max(ready, readyAfter(history[a.buffer].writes, box(a, whole)));
    };
    for (int s = 0; s < 3; ++s)
      if (roles.reads[s]) reads(in.src[s], s == 0 && dyn_src);
    Box dst_box{0, 0, 0, 0};
    const bool has_dst = in.dst.buffer >= 0 && in.dst.count() > 0;
    if (has_dst) {
      dst_box = box(in.dst, dyn_dst);
      const History& h = history[in.dst.buffer];
      ready = std::max(
          {ready, readyAfter(h.writes, dst_box), readyAfter(h.reads, dst_box)});
    }
    // A second destination waits like the first.
    for (int s = 0; s < 3; ++s) {
      const Access& a = in.src[s];
      if (!roles.writes[s] || a.buffer < 0 || a.count() == 0) continue;
      const History& h = history[a.buffer];
      const Box b = boxOf(prog, a);
      ready =
          std::max({ready, readyAfter(h.writes, b), readyAfter(h.reads, b)});
    }
    double start = std::max(engine_free[core][e], ready);
    double finish;
    if (in.engine == Engine::kDma && (in.flags & kFlagCollective)) {
      const CollectiveTransferCost c = collectiveTransferCost(prog, in, p);
      start = cc[core].reserve(ready, c.transfer_ns);
      finish = start + c.transfer_ns + c.latency_ns;
      int64_t rows = 1;
      out.dma_bytes += dmaBytes(prog, in.dst, rows);
    } else if (in.engine == Engine::kDma) {
      // The bandwidth is the shared resource and the latency overlaps. The
      // DMA queues run independently: a transfer whose data is ready may use
      // time the bandwidth sat idle while an earlier one (in program order)
      // waited for its data.
      start = dma[core].reserve(ready, cost);
      finish = start + cost + p.dma_latency_ns;
      int64_t rows = 1;
      out.dma_bytes += std::max(dmaBytes(prog, in.src[0], rows),
                                dmaBytes(prog, in.dst, rows));
    } else {
      finish = start + cost;
      engine_free[core][e] = finish;
    }
    if (in.op == Op::kMatmul)
      out.matmul_flops +=
          2 * in.src[0].size[0] * in.src[0].size[1] * in.src[1].size[1];
    if (in.op == Op::kMatmulMx)  // K x 4 contracted values per output
      out.matmul_flops += 8 * in.dst.count() * in.src[0].size[0];
    out.busy_ns[e] += cost;
    out.instructions[e] += 1;
    end = std::max(end, finish);
    for (int s = 0; s < 3; ++s) {
      const Access& a = in.src[s];
      if (a.buffer < 0 || a.count() == 0) continue;
      if (roles.reads[s])
        record(history[a.buffer].reads, box(a, s == 0 && dyn_src), finish);
      if (roles.writes[s])
        record(history[a.buffer].writes, boxOf(prog, a), finish);
    }
    if (has_dst) record(history[in.dst.buffer].writes, dst_box, finish);
  }
  out.total_ns = end;
  return out;
}

}  // namespace nki
}  // namespace neuron_rt
