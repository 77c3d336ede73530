#include "neuron_runtime/nki/program.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "neuron_runtime/nki/bitcast.h"
#include "neuron_runtime/nki/control_flow.h"
#include "neuron_runtime/nki/cost_model.h"
#include "neuron_runtime/nki/definedness.h"
#include "neuron_runtime/nki/mx.h"
#include "neuron_runtime/nki/operands.h"

namespace neuron_rt {
namespace nki {
namespace {

// Messages name buffers as "{buffer:K}"; the front end replaces the token by
// the buffer's name and where it was allocated.
std::string bufferToken(int32_t b) {
  return "{buffer:" + std::to_string(b) + "}";
}

const char* opName(Op op) {
  static const char* names[] = {"copy",
                                "tensor_tensor",
                                "tensor_scalar",
                                "activation",
                                "tensor_reduce",
                                "nc_matmul",
                                "iota",
                                "memset",
                                "select",
                                "affine_select",
                                "bn_stats",
                                "bn_aggr",
                                "tensor_tensor_scan",
                                "nc_transpose",
                                "tensor indirection",
                                "dynamic DMA",
                                "max8",
                                "nc_find_index8",
                                "nc_match_replace8",
                                "nonzero_with_count",
                                "random_seed",
                                "rand",
                                "dropout",
                                "quantize_mx",
                                "nc_matmul_mx",
                                "nc_matmul_mx",
                                "dtype view copy"};
  // Control flow's codes sit apart from the contiguous ones (program.h).
  if (op == Op::kScalar) return "scalar";
  if (op == Op::kBranch) return "branch";
  const int k = static_cast<int>(op);
  return k < static_cast<int>(sizeof(names) / sizeof(names[0])) ? names[k]
                                                                : "?";
}

bool sameShape(const Access& a, const Access& b) {
  if (a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d)
    if (a.size[d] != b.size[d]) return false;
  return true;
}

// Elements per partition: the product of every dim but the first.
int64_t freeCount(const Access& a) {
  int64_t n = 1;
  for (int d = 1; d < a.ndim; ++d) n *= a.size[d];
  return n;
}

std::string shapeString(const Access& a) {
  std::string s = "[";
  for (int d = 0; d < a.ndim; ++d) {
    if (d) s += ", ";
    s += std::to_string(a.size[d]);
  }
  return s + "]";
}

}  // namespace

const char* engineName(Engine e) {
  static const char* names[] = {"dma", "tensor", "vector", "scalar", "gpsimd"};
  const int k = static_cast<int>(e);
  return k < kEngines ? names[k] : "?";
}

Program::Program(std::vector<Buffer> buffers,
                 std::vector<Instruction> instructions, int32_t externals)
    : buffers_(std::move(buffers)),
      instructions_(std::move(instructions)),
      externals_(externals) {
  checkStructure();
  checkDefinedness(*this);
  planMemory();  // records the high-water marks in profile_
  Profile cost = estimateCost(*this);
  cost.sbuf_high_water = profile_.sbuf_high_water;
  cost.psum_high_water = profile_.psum_high_water;
  profile_ = cost;
}

// Everything the interpreter relies on: operand shapes per op, accesses
// inside their buffers. The front end checks the same with better messages;
// this keeps a malformed program from touching memory it does not own.
void Program::checkStructure() const {
  const int64_t nb = static_cast<int64_t>(buffers_.size());
  for (int64_t b = 0; b < nb; ++b) {
    const Buffer& buf = buffers_[b];
    if (buf.elements < 0 || buf.dtype >= DType::kCount)
      throw ProgramError(buf.loc, -1, "malformed buffer " + bufferToken(b));
    if (buf.external >= externals_)
      throw ProgramError(
          buf.loc, -1,
          "buffer " + bufferToken(b) + " names a missing argument");
  }
  for (size_t i = 0; i < instructions_.size(); ++i) {
    const Instruction& in = instructions_[i];
    auto fail = [&](const std::string& why) {
      throw ProgramError(in.loc, static_cast<int64_t>(i),
                         std::string(opName(in.op)) + ": " + why);
    };
    if (static_cast<int>(in.op) >= kOps ||
        static_cast<int>(in.engine) >= kEngines || in.alu0 >= Alu::kCount ||
        in.alu1 >= Alu::kCount || in.act >= Act::kCount)
      fail("malformed instruction");
    const OperandRoles roles = operandRoles(in);
    auto checkAccess = [&](const Access& a, bool needs_memory,
                           const char* what) {
      if (a.ndim < 0 || a.ndim > kMaxDims)
        fail(std::string(what) + ": bad rank");
      for (int d = 0; d < a.ndim; ++d)
        if (a.size[d] < 0) fail(std::string(what) + ": negative size");
      if (a.buffer < 0) {
        if (needs_memory) fail(std::string(what) + " has no buffer");
        return;
      }
      if (a.buffer >= nb) fail(std::string(what) + ": no such buffer");
      if (a.count() == 0) return;
      int64_t lo = a.offset, hi = a.offset;
      for (int d = 0; d < a.ndim; ++d) {
        const int64_t span = a.stride[d] * (a.size[d] - 1);
        (span < 0 ? lo : hi) += span;
      }
      const int64_t n = buffers_[a.buffer].elements;
      if (lo < 0 || hi >= n)
        fail(std::string(what) + " reaches elements [" + std::to_string(lo) +
             ", " + std::to_string(hi) + "] of " + bufferToken(a.buffer) +
             ", which has " + std::to_string(n));
    };
    // Control flow's records check themselves (control_flow.h).
    if (isControlFlow(in.op)) {
      checkControlFlow(buffers_, in, static_cast<int64_t>(i),
                       static_cast<int64_t>(instructions_.size()));
      checkAccess(in.dst, false, "destination");
      checkAccess(in.src[0], false, "operand");
      continue;
    }
    // random_seed alone writes no memory (it sets the random state).
    if (in.op == Op::kRandomSeed || in.op == Op::kMxLoadStationary) {
      if (in.dst.buffer >= 0) fail("writes no destination");
    } else {
      checkAccess(in.dst, true, "destination");
    }
    for (int s = 0; s < 3; ++s) {
      if (!roles.uses(s)) continue;
      checkAccess(in.src[s], roles.reads[s] || roles.writes[s],
                  roles.writes[s] ? "second destination" : "operand");
      if (roles.affine[s] && in.src[s].buffer >= 0)
        fail("expects an affine expression");
    }
    switch (in.op) {
      case Op::kMatmul: {
        const Access &st = in.src[0], &mv = in.src[1], &d = in.dst;
        if (st.ndim != 2 || mv.ndim != 2 || d.ndim != 2 ||
            st.size[0] != mv.size[0] || d.size[0] != st.size[1] ||
            d.size[1] != mv.size[1])
          fail("shapes " + shapeString(st) + " x " + shapeString(mv) + " -> " +
               shapeString(d) + " do not match");
        break;
      }
      case Op::kTranspose:
        if (in.src[0].ndim != 2 || in.dst.ndim != 2 ||
            in.src[0].size[0] != in.dst.size[1] ||
            in.src[0].size[1] != in.dst.size[0])
          fail("shapes do not match");
        break;
      case Op::kReduce: {
        const Access &s = in.src[0], &d = in.dst;
        if (in.keep < 0 || in.keep > s.ndim || d.ndim != in.keep)
          fail("bad reduction axes");
        for (int k = 0; k < in.keep; ++k)
          if (s.size[k] != d.size[k]) fail("shapes do not match");
        break;
      }
      case Op::kBnStats:
        if (in.src[0].ndim != 2 || in.dst.ndim != 2 || in.dst.size[1] != 6 ||
            in.dst.size[0] != in.src[0].size[0])
          fail("expects [P, F] -> [P, 6]");
        break;
      case Op::kBnAggr:
        if (in.src[0].ndim != 2 || in.dst.ndim != 2 || in.dst.size[1] != 2 ||
            in.src[0].size[1] % 6 != 0 || in.src[0].size[1] == 0 ||
            in.dst.size[0] != in.src[0].size[0])
          fail("expects [P, 6k] -> [P, 2]");
        break;
      case Op::kScan: {
        const Access& d = in.dst;
        if (d.ndim != 2) fail("expects 2-D tiles");
        for (int s = 0; s < 2; ++s)
          if (!sameShape(in.src[s], d))
            fail("operand shape " + shapeString(in.src[s]) +
                 " does not match the destination " + shapeString(d));
        const Access& init = in.src[2];
        if (roles.reads[2] &&
            (init.ndim != 2 || init.size[0] != d.size[0] || init.size[1] != 1))
          fail("the initial values " + shapeString(init) +
               " are not one per partition of " + shapeString(d));
        break;
      }
      case Op::kGather: {
        const Access &d = in.dst, &data = in.src[0], &idx = in.src[1];
        if (d.ndim != 2 || data.ndim != 2 || idx.ndim != 2)
          fail("expects 2-D tiles");
        const int64_t P = d.size[0];
        if (data.size[0] != P || idx.size[0] != P)
          fail("the data " + shapeString(data) + ", index " + shapeString(idx) +
               " and destination " + shapeString(d) +
               " tiles differ in partitions");
        if (P % kIndirectionGroup != 0)
          fail("partitions " + std::to_string(P) +
               " are not whole groups of 16");
        if (idx.size[1] * kIndirectionGroup < d.size[1])
          fail("the index tile " + shapeString(idx) + " holds fewer than the " +
               std::to_string(d.size[1]) + " offsets per group");
        break;
      }
      case Op::kDmaDynamic: {
        const Access &d = in.dst, &data = in.src[0], &idx = in.src[1];
        if (in.engine != Engine::kDma) fail("runs on the DMA engine only");
        if (!sameShape(data, d))
          fail("operand shape " + shapeString(data) +
               " does not match the destination " + shapeString(d));
        if (in.flags & kFlagVectorOffset) {
          if (d.ndim < 1 || idx.ndim != 1 || idx.size[0] != d.size[0])
            fail("the index " + shapeString(idx) +
                 " is not one value per partition of " + shapeString(d));
        } else if (idx.count() != 1) {
          fail("the index " + shapeString(idx) + " is not one value");
        }
        if (!(in.imm[1] >= 1) || in.imm[2] > in.imm[3] || in.imm[2] < 0 ||
            in.imm[3] >= in.imm[1])
          fail("malformed index range");
        break;
      }
      case Op::kMax8:
      case Op::kFindIndex8:
      case Op::kMatchReplace8:
      case Op::kNonzeroWithCount: {
        // Partition-major operands of dst's partitions; each op's free
        // element counts (the front end checks NKI's limits on them).
        const Access& d = in.dst;
        for (int s = 0; s < 3; ++s) {
          if (!roles.uses(s)) continue;
          if (in.src[s].ndim < 1 || d.ndim < 1 ||
              in.src[s].size[0] != d.size[0])
            fail("operand " + shapeString(in.src[s]) + " and destination " +
                 shapeString(d) + " differ in partitions");
        }
        const int64_t n = freeCount(in.src[0]);
        auto expect = [&](const Access& a, int64_t count, const char* what) {
          if (freeCount(a) != count)
            fail(std::string(what) + " " + shapeString(a) + " does not hold " +
                 std::to_string(count) + " elements per partition");
        };
        if (n < 1) fail("the data has no elements");
        if (in.op == Op::kMax8) {
          expect(d, kSearchValues, "the destination");
          if (n < kSearchValues) fail("fewer than 8 elements per partition");
        } else if (in.op == Op::kFindIndex8) {
          expect(d, kSearchValues, "the destination");
          expect(in.src[1], kSearchValues, "the values");
        } else if (in.op == Op::kMatchReplace8) {
          expect(d, n, "the destination");
          expect(in.src[1], kSearchValues, "the values");
          if (roles.writes[2])
            expect(in.src[2], kSearchValues, "the index destination");
        } else {
          expect(d, n + 1, "the destination");
        }
        break;
      }
      case Op::kQuantizeMx:
      case Op::kMxLoadStationary:
      case Op::kMatmulMx: {
        const std::string why = mxCheck(instructions_, i, buffers_);
        if (!why.empty()) fail(why);
        break;
      }
      case Op::kRawCopy: {
        const std::string why = rawCopyCheck(in, buffers_);
        if (!why.empty()) fail(why);
        break;
      }
      case Op::kRandomSeed:
        if (roles.reads[0] &&
            (in.src[0].count() != 1 ||
             elementSize(buffers_[in.src[0].buffer].dtype) != 4))
          fail("the seed " + shapeString(in.src[0]) +
               " is not one 32-bit element");
        if (!roles.reads[0] &&
            !(in.imm[0] >= 0 && in.imm[0] < 4294967296.0 &&
              in.imm[0] ==
                  static_cast<double>(static_cast<int64_t>(in.imm[0]))))
          fail("the seed is not a 32-bit value");
        break;
      case Op::kRandom:
        if (!isFloat(buffers_[in.dst.buffer].dtype))
          fail("uniform values in [0, 1) need a float destination, not " +
               std::string(dtypeName(buffers_[in.dst.buffer].dtype)));
        break;
      default:
        for (int s = 0; s < 3; ++s)
          if (roles.uses(s) && !sameShape(in.src[s], in.dst))
            fail("operand shape " + shapeString(in.src[s]) +
                 " does not match the destination " + shapeString(in.dst));
    }
  }
}

namespace {

// Whether `a` writes every element of `buf` (offset 0, one element per
// position, row-major after ordering its steps): a write that ends the
// buffer's previous value.
bool coversWholeBuffer(const Access& a, const Buffer& buf) {
  if (a.offset != 0 || a.count() != buf.elements) return false;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
  for (int d = 0; d < a.ndim; ++d)
    if (a.size[d] > 1) dims.emplace_back(a.stride[d], a.size[d]);
  std::sort(dims.begin(), dims.end());
  int64_t expect = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expect) return false;
    expect *= size;
  }
  return true;
}

// Ops whose destination access may be written only in part (some
// partitions, skipped out-of-range rows): never a whole overwrite.
bool writesPartOfDestination(Op op) {
  return op == Op::kNonzeroWithCount || op == Op::kDmaDynamic;
}

}  // namespace

// Live ranges of the internal buffers decide both the capacity checks (the
// SBUF/PSUM bytes per partition of the tiles live at each instruction) and
// where each buffer lives in the run's scratch (buffers whose live ranges do
// not overlap share memory).
//
// On chip a tile is live in segments, as the compiler allocates it: from a
// write to its last read before the next write of the whole tile (which
// does not read it). A tile allocated before a loop and rewritten in each
// iteration therefore frees its space between its last read in one
// iteration and its first write in the next, for the other tiles. Scratch
// in host memory keeps one range per buffer (first to last use).
void Program::planMemory() {
  const size_t nb = buffers_.size();
  std::vector<int64_t> first(nb, -1), last(nb, -1);
  // The on-chip segments: [start, end] instruction ranges per buffer.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> segments(nb);
  auto touch = [&](int32_t b, int64_t i, bool starts_value) {
    if (b < 0) return;
    if (first[b] < 0) {
      first[b] = i;
      segments[b].push_back({i, i});
    } else if (starts_value) {
      segments[b].push_back({i, i});
    } else {
      segments[b].back().second = i;
    }
    last[b] = i;
  };
  for (size_t i = 0; i < instructions_.size(); ++i) {
    const Instruction& in = instructions_[i];
    const OperandRoles roles = operandRoles(in);
    const int64_t at = static_cast<int64_t>(i);
    bool reads_dst = roles.accumulates || writesPartOfDestination(in.op);
    for (int s = 0; s < 3; ++s)
      if ((roles.reads[s] || roles.affine[s]) &&
          in.src[s].buffer == in.dst.buffer)
        reads_dst = true;
    for (int s = 0; s < 3; ++s)
      if (roles.reads[s] || roles.writes[s]) touch(in.src[s].buffer, at, false);
    if (in.dst.buffer >= 0) {
      const Buffer& buf = buffers_[in.dst.buffer];
      touch(in.dst.buffer, at,
            buf.space != Space::kHbm && !reads_dst &&
                coversWholeBuffer(in.dst, buf));
    }
  }
  // A loop's body runs again after its end: what it carries stays live.
  extendLiveRangesOverLoops(buffers_, instructions_, segments, first, last);
  // Capacity: sweep the instructions with the live set's bytes.
  const int64_t ni = static_cast<int64_t>(instructions_.size());
  std::vector<std::vector<int32_t>> starts(ni), ends(ni);
  for (size_t b = 0; b < nb; ++b) {
    if (first[b] < 0 || buffers_[b].space == Space::kHbm) continue;
    for (const auto& [from, to] : segments[b]) {
      starts[from].push_back(static_cast<int32_t>(b));
      ends[to].push_back(static_cast<int32_t>(b));
    }
  }
  auto footprint = [&](const Buffer& buf) {
    if (buf.space == Space::kPsum)  // PSUM is allocated in whole banks
      return (buf.bytes_per_partition + kPsumBankBytes - 1) / kPsumBankBytes *
             kPsumBankBytes;
    return buf.bytes_per_partition;
  };
  // Each physical core of a logical core (LNC=2) has its own SBUF and PSUM:
  // a tile counts against its core's.
  int64_t sbuf[kMaxCores] = {}, psum[kMaxCores] = {};
  int64_t sbuf_hw = 0, psum_hw = 0;
  bool several_cores = false;
  for (const Buffer& buf : buffers_) several_cores |= buf.core != 0;
  std::vector<int32_t> live;
  for (int64_t i = 0; i < ni; ++i) {
    for (int32_t b : starts[i]) {
      const Buffer& buf = buffers_[b];
      (buf.space == Space::kSbuf ? sbuf : psum)[buf.core] += footprint(buf);
      live.push_back(b);
    }
    for (int c = 0; c < kMaxCores; ++c) {
      sbuf_hw = std::max(sbuf_hw, sbuf[c]);
      psum_hw = std::max(psum_hw, psum[c]);
      const bool over_sbuf = sbuf[c] > kSbufBytesPerPartition;
      const bool over_psum = psum[c] > kPsumBytesPerPartition;
      if (!over_sbuf && !over_psum) continue;
      const Space space = over_sbuf ? Space::kSbuf : Space::kPsum;
      // The live tiles grouped by where they were allocated (a loop's
      // allocation is many tiles of one kind), the largest groups first, so
      // the list shows what fills the memory.
      struct Group {
        int32_t first;
        int64_t count, bytes;
      };
      std::vector<Group> groups;
      for (int32_t b : live) {
        const Buffer& buf = buffers_[b];
        if (buf.space != space || buf.core != c) continue;
        auto same = [&](const Group& g) {
          const Buffer& o = buffers_[g.first];
          return o.loc == buf.loc && o.dtype == buf.dtype &&
                 o.elements == buf.elements && o.partitions == buf.partitions;
        };
        auto it = std::find_if(groups.begin(), groups.end(), same);
        if (it == groups.end()) {
          groups.push_back({b, 1, footprint(buf)});
        } else {
          ++it->count;
        }
      }
      std::stable_sort(groups.begin(), groups.end(),
                       [](const Group& x, const Group& y) {
                         return x.count * x.bytes > y.count * y.bytes;
                       });
      std::string list;
      constexpr size_t kShownGroups = 12;
      int64_t hidden = 0;
      for (size_t g = 0; g < groups.size(); ++g) {
        const Group& gr = groups[g];
        if (g >= kShownGroups) {
          hidden += gr.count;
          continue;
        }
        list += "\n  " +
                (gr.count > 1 ? std::to_string(gr.count) + " x " : "") +
                bufferToken(gr.first) + ": " + std::to_string(gr.bytes) +
                (gr.count > 1 ? " bytes each" : " bytes");
      }
      if (hidden > 0) list += "\n  ... and " + std::to_string(hidden) + " more";
      const std::string on_core =
          several_cores ? " on core " + std::to_string(c) : "";
      const Instruction& in = instructions_[i];
      throw ProgramError(
          in.loc, i,
          over_sbuf
              ? "SBUF capacity exceeded" + on_core + ": the live tiles need " +
                    std::to_string(sbuf[c]) +
                    " bytes per partition, SBUF has " +
                    std::to_string(kSbufBytesPerPartition) + " (" +
                    std::to_string(kSbufBytesPerPartition / 1024) +
                    " KiB) per partition. Live SBUF tiles:" + list
              : "PSUM capacity exceeded" + on_core + ": the live tiles need " +
                    std::to_string(psum[c] / kPsumBankBytes) +
                    " banks of 2 KiB per partition, PSUM has 8. Live PSUM "
                    "tiles:" +
                    list);
    }
    for (int32_t b : ends[i]) {
      const Buffer& buf = buffers_[b];
      (buf.space == Space::kSbuf ? sbuf : psum)[buf.core] -= footprint(buf);
      live.erase(std::find(live.begin(), live.end(), b));
    }
  }
  profile_.sbuf_high_water = sbuf_hw;
  profile_.psum_high_water = psum_hw;

  // Scratch placement: first fit over the live ranges, by first use.
  std::vector<int32_t> order;
  for (size_t b = 0; b < nb; ++b)
    if (buffers_[b].external < 0 && first[b] >= 0)
      order.push_back(static_cast<int32_t>(b));
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return first[a] < first[b]; });
  scratch_offset_.assign(nb, -1);
  std::map<int64_t, std::pair<int64_t, int32_t>> placed;  // offset -> (end, b)
  int64_t top = 0;
  for (int32_t b : order) {
    for (auto it = placed.begin(); it != placed.end();) {
      if (last[it->second.second] < first[b]) {
        it = placed.erase(it);
      } else {
        ++it;
      }
    }
    const int64_t bytes =
        (buffers_[b].elements * elementSize(buffers_[b].dtype) + 63) / 64 * 64;
    int64_t at = 0;
    for (const auto& kv : placed) {
      if (kv.first - at >= bytes) break;
      at = std::max(at, kv.second.first);
    }
    placed[at] = {at + bytes, b};
    scratch_offset_[b] = at;
    top = std::max(top, at + bytes);
  }
  scratch_bytes_ = top;
}

}  // namespace nki
}  // namespace neuron_rt
