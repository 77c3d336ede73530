#include "neuron_runtime/nki/definedness.h"

#include <algorithm>
#include <string>
#include <vector>

#include "neuron_runtime/nki/access_rows.h"
#include "neuron_runtime/nki/mx.h"
#include "neuron_runtime/nki/operands.h"

namespace neuron_rt {
namespace nki {
namespace {

// Where undefined data in a buffer came from: the instruction that read
// never-written memory (and which buffer that was).
struct Origin {
  int64_t instruction = -1;
  int32_t loc = -1;
  int32_t buffer = -1;
};

class DefinednessPass {
 public:
  explicit DefinednessPass(const Program& p)
      : p_(p),
        shadow_(p.buffers().size()),
        undefined_(p.buffers().size(), 0),
        counted_(p.buffers().size(), 0),
        origin_(p.buffers().size()) {}

  void run() {
    const auto& ins = p_.instructions();
    for (size_t i = 0; i < ins.size(); ++i)
      step(ins[i], static_cast<int64_t>(i));
    // Undefined values stored into a kernel's tensor reach the caller unless
    // a later store overwrote them (NKI-lib stores a whole tile, then zeros
    // over the rows it never computed).
    for (size_t b = 0; b < pending_.size(); ++b)
      if (pending_[b].from.instruction >= 0 &&
          undefinedCount(static_cast<int32_t>(b)) > 0) {
        const Origin& o = pending_[b].from;
        throw ProgramError(
            o.loc, o.instruction,
            "reads memory that was never written ({buffer:" +
                std::to_string(o.buffer) +
                "}), and the values computed from it reach the kernel's "
                "{buffer:" +
                std::to_string(b) + "} through the store at {loc:" +
                std::to_string(pending_[b].store_loc) +
                "} (uninitialized memory)");
      }
  }

 private:
  // 1 = defined. A buffer's shadow is made on first use; undefined_[b]
  // counts its undefined elements, so reads of fully defined buffers (the
  // common case) and all-defined writes into them cost nothing.
  uint8_t* shadow(int32_t b) {
    auto& s = shadow_[b];
    if (s.empty()) {
      const Buffer& buf = p_.buffers()[b];
      s.assign(static_cast<size_t>(std::max<int64_t>(buf.elements, 1)),
               buf.initialized ? 1 : 0);
    }
    return s.data();
  }
  int64_t& undefinedCount(int32_t b) {
    if (!counted_[b]) {
      counted_[b] = 1;
      const Buffer& buf = p_.buffers()[b];
      undefined_[b] = buf.initialized ? 0 : buf.elements;
    }
    return undefined_[b];
  }

  // Reads of `a` at a row: AND into acc.
  void andRow(const Access& a, int64_t off, int64_t n, uint8_t* acc,
              Origin& from, int64_t i, int32_t loc) {
    if (a.buffer < 0) return;  // an affine expression: always defined
    if (undefinedCount(a.buffer) == 0) return;
    const uint8_t* s = shadow(a.buffer);
    const int64_t st = innerStride(a);
    bool undefined = false;
    for (int64_t k = 0; k < n; ++k) {
      const uint8_t v = s[off + k * st];
      acc[k] &= v;
      undefined |= !v;
    }
    if (undefined && from.instruction < 0) {
      const Origin& o = origin_[a.buffer];
      from = o.instruction >= 0 ? o : Origin{i, loc, a.buffer};
    }
  }

  void writeRow(const Access& a, int64_t off, int64_t n, const uint8_t* v) {
    int64_t& count = undefinedCount(a.buffer);
    bool all = true;
    for (int64_t k = 0; k < n; ++k) all &= v[k] != 0;
    if (all && count == 0) return;
    uint8_t* s = shadow(a.buffer);
    const int64_t st = innerStride(a);
    for (int64_t k = 0; k < n; ++k) {
      uint8_t& e = s[off + k * st];
      count += static_cast<int64_t>(e) - static_cast<int64_t>(v[k]);
      e = v[k];
    }
  }

  // The result is undefined somewhere: remember why, and fail if it is
  // memory the caller sees.
  void taint(const Instruction& in, const Origin& from) {
    taint(in, from, in.dst.buffer);
    const OperandRoles roles = operandRoles(in);
    for (int s = 0; s < 3; ++s)
      if (roles.writes[s]) taint(in, from, in.src[s].buffer);
  }
  void taint(const Instruction& in, const Origin& from, int32_t b) {
    const Buffer& buf = p_.buffers()[b];
    if (buf.external >= 0) {
      // Decided at the end of the pass (run): a later store may overwrite.
      if (pending_.size() < p_.buffers().size())
        pending_.resize(p_.buffers().size());
      if (pending_[b].from.instruction < 0) pending_[b] = {from, in.loc};
      return;
    }
    if (origin_[b].instruction < 0) origin_[b] = from;
  }

  uint8_t* row(int k, int64_t n) {
    auto& r = rows_[k];
    if (static_cast<int64_t>(r.size()) < n) r.resize(static_cast<size_t>(n));
    return r.data();
  }

  // Whether `a` is every element of its buffer exactly once (a dense
  // layout of the buffer's elements, in any dimension order).
  bool coversBuffer(const Access& a) const {
    const Buffer& buf = p_.buffers()[a.buffer];
    if (a.offset != 0 || a.count() != buf.elements) return false;
    int order[kMaxDims];
    int nd = 0;
    for (int d = 0; d < a.ndim; ++d)
      if (a.size[d] != 1) order[nd++] = d;
    for (int k = 1; k < nd; ++k)  // insertion sort by stride
      for (int j = k; j > 0 && a.stride[order[j]] < a.stride[order[j - 1]]; --j)
        std::swap(order[j], order[j - 1]);
    int64_t expect = 1;
    for (int k = 0; k < nd; ++k) {
      if (a.stride[order[k]] != expect) return false;
      expect *= a.size[order[k]];
    }
    return true;
  }

  bool whollyDefined(const Access& a) {
    return a.buffer < 0 || undefinedCount(a.buffer) == 0;
  }

  bool sourcesDefined(const Instruction& in, const OperandRoles& roles) {
    for (int s = 0; s < 3; ++s)
      if (roles.reads[s] && !whollyDefined(in.src[s])) return false;
    return !roles.accumulates || whollyDefined(in.dst);
  }

  // v &= whether operand s of an MX record is defined where it is read: a
  // scale tile only at its scale rows (mx.h mxScaleRow), the rest whole.
  void andMx(const Instruction& in, int s, uint8_t& v, Origin& from,
             int64_t i) {
    const Access& a = in.src[s];
    const bool scales =
        s == 1 && (in.op == Op::kMxLoadStationary || in.op == Op::kMatmulMx);
    const int64_t data_rows = in.src[0].size[0];
    auto andPart = [&](const Access& part) {
      const Access* one[1] = {&part};
      forEachRow(part, one, 1, [&](const int64_t* off, int64_t n) {
        uint8_t* acc = row(0, n);
        std::fill(acc, acc + n, 1);
        andRow(part, off[0], n, acc, from, i, in.loc);
        for (int64_t k = 0; k < n; ++k) v &= acc[k];
      });
    };
    if (!scales) return andPart(a);
    for (int64_t p = 0; p < data_rows; p += 8) {
      Access part = a;
      part.offset += mxScaleRow(p) * a.stride[0];
      part.size[0] = 1;
      andPart(part);
    }
  }

  void step(const Instruction& in, int64_t i) {
    const OperandRoles roles = operandRoles(in);
    if (in.op == Op::kRandomSeed) {
      // The random values after it are as defined as its seed.
      Origin from;
      if (roles.reads[0]) {
        uint8_t v = 1;
        andRow(in.src[0], in.src[0].offset, 1, &v, from, i, in.loc);
      }
      rng_origin_ = from;
      return;
    }
    if (in.op == Op::kMxLoadStationary) {
      // Whether the loaded MX stationary (and its scales) is defined: the
      // next kMatmulMx of the core reads it (mx.h).
      uint8_t v = 1;
      Origin from;
      andMx(in, 0, v, from, i);
      andMx(in, 1, v, from, i);
      const int core = p_.buffers()[in.src[0].buffer].core;
      mx_loaded_[core] = v;
      mx_loaded_from_[core] = from;
      return;
    }
    if (in.dst.buffer < 0) return;
    // rand and dropout write their whole destination; their random values
    // are undefined after a seed that was.
    const bool rng_undefined =
        (in.op == Op::kRandom || in.op == Op::kDropout) &&
        rng_origin_.instruction >= 0;
    // Fast paths: defined data into memory that is (or becomes wholly)
    // defined changes nothing but the count. Not for an instruction with a
    // second destination (that one changes too), and the whole destination
    // becomes defined only if every partition of it is written.
    const bool second_dst =
        roles.writes[0] || roles.writes[1] || roles.writes[2];
    if (!second_dst && !rng_undefined && in.op != Op::kMatmulMx &&
        sourcesDefined(in, roles)) {
      int64_t& count = undefinedCount(in.dst.buffer);
      if (count == 0) return;
      if (in.op != Op::kNonzeroWithCount && coversBuffer(in.dst)) {
        count = 0;
        std::vector<uint8_t>().swap(shadow_[in.dst.buffer]);
        return;
      }
    }
    Origin from;
    bool any_undefined = false;
    switch (in.op) {
      case Op::kQuantizeMx:
      case Op::kMatmulMx: {
        // MX records (mx.h): a value depends on its group, its scale and
        // (matmul) a whole contraction; conservatively, the destinations as
        // a whole on the sources as a whole (a matmul's stationary is read
        // by the kMxLoadStationary before it, checked there as a read).
        uint8_t v = 1;
        if (in.op == Op::kMatmulMx) {
          const int core = p_.buffers()[in.dst.buffer].core;
          v = mx_loaded_[core];
          if (!v && from.instruction < 0) from = mx_loaded_from_[core];
        }
        for (int s = 0; s < 3; ++s)
          if (roles.reads[s]) andMx(in, s, v, from, i);
        auto define = [&](const Access& a, bool accumulate) {
          const Access* one[1] = {&a};
          forEachRow(a, one, 1, [&](const int64_t* off, int64_t n) {
            uint8_t* out = row(1, n);
            std::fill(out, out + n, v);
            if (accumulate) andRow(a, off[0], n, out, from, i, in.loc);
            for (int64_t k = 0; k < n; ++k) any_undefined |= !out[k];
            writeRow(a, off[0], n, out);
          });
        };
        define(in.dst, roles.accumulates);
        if (roles.writes[2]) {
          // The scales: the quadrants the data covers (mx.h).
          Access sc = in.src[2];
          const int64_t quadrants = (in.dst.size[0] + 31) / 32;
          sc.size[0] = std::min(sc.size[0], quadrants * 32);
          define(sc, false);
        }
        break;
      }
      case Op::kMatmul: {
        // dst[m, n] = AND_k st[k, m] & mv[k, n] (& dst when accumulating).
        const Access &st = in.src[0], &mv = in.src[1], &d = in.dst;
        const int64_t K = st.size[0], M = st.size[1], N = mv.size[1];
        uint8_t* cm = row(0, M);
        uint8_t* cn = row(1, N);
        std::fill(cm, cm + M, 1);
        std::fill(cn, cn + N, 1);
        for (int64_t k = 0; k < K; ++k) {
          andRow(st, st.offset + k * st.stride[0], M, cm, from, i, in.loc);
          andRow(mv, mv.offset + k * mv.stride[0], N, cn, from, i, in.loc);
        }
        uint8_t* out = row(2, N);
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t n = 0; n < N; ++n) out[n] = cm[m] & cn[n];
          const int64_t off = d.offset + m * d.stride[0];
          if (roles.accumulates) andRow(d, off, N, out, from, i, in.loc);
          for (int64_t n = 0; n < N; ++n) any_undefined |= !out[n];
          writeRow(d, off, N, out);
        }
        break;
      }
      case Op::kReduce:
      case Op::kBnStats:
      case Op::kBnAggr:
      case Op::kScan:
      case Op::kGather:
      case Op::kMax8:
      case Op::kFindIndex8:
      case Op::kMatchReplace8:
      case Op::kNonzeroWithCount: {
        // Each destination element depends on a set of source elements;
        // conservatively: a source row (all reduced / scanned / gathered-from
        // / searched elements of a partition) decides the whole destination
        // row of that partition (and of a second destination's).
        // nonzero_with_count writes only each GpSimd core's first partition.
        const Access& d = in.dst;
        const int64_t P = d.ndim ? d.size[0] : 1;
        const int64_t step =
            in.op == Op::kNonzeroWithCount ? kGpSimdCorePartitions : 1;
        // The part of `a` in partition p.
        auto partition = [](Access a, int64_t p) {
          if (a.ndim) {
            a.offset += p * a.stride[0];
            a.size[0] = 1;
          }
          return a;
        };
        for (int64_t p = 0; p < P; p += step) {
          uint8_t v = 1;
          for (int s = 0; s < 3; ++s) {
            if (!roles.reads[s]) continue;
            const Access sp = partition(in.src[s], p);
            const Access* one[1] = {&sp};
            forEachRow(sp, one, 1, [&](const int64_t* off, int64_t n) {
              uint8_t* acc = row(0, n);
              std::fill(acc, acc + n, 1);
              andRow(sp, off[0], n, acc, from, i, in.loc);
              for (int64_t k = 0; k < n; ++k) v &= acc[k];
            });
          }
          any_undefined |= !v;
          auto define = [&](const Access& whole) {
            const Access dp = partition(whole, p);
            const Access* dd[1] = {&dp};
            forEachRow(dp, dd, 1, [&](const int64_t* off, int64_t n) {
              uint8_t* out = row(1, n);
              std::fill(out, out + n, v);
              writeRow(dp, off[0], n, out);
            });
          };
          define(d);
          for (int s = 0; s < 3; ++s)
            if (roles.writes[s]) define(in.src[s]);
        }
        break;
      }
      case Op::kDmaDynamic: {
        // Which rows move is known only at run time. The index must be
        // defined; the dynamic side counts as its static rows: a gather's
        // source as defined (it is usually a kernel argument) and a
        // scatter's destination as not (re)defined, so that no valid kernel
        // is refused for rows the check cannot know.
        const bool dyn_dst = in.flags & kFlagDynamicDst;
        uint8_t idx_ok = 1;
        const Access& idx = in.src[1];
        const Access* one[1] = {&idx};
        forEachRow(idx, one, 1, [&](const int64_t* off, int64_t n) {
          uint8_t* acc = row(0, n);
          std::fill(acc, acc + n, 1);
          andRow(idx, off[0], n, acc, from, i, in.loc);
          for (int64_t k = 0; k < n; ++k) idx_ok &= acc[k];
        });
        any_undefined |= !idx_ok;
        if (dyn_dst) {
          // The scattered values must be defined: they reach the memory.
          const Access* src[1] = {&in.src[0]};
          forEachRow(in.src[0], src, 1, [&](const int64_t* off, int64_t n) {
            uint8_t* acc = row(0, n);
            std::fill(acc, acc + n, 1);
            andRow(in.src[0], off[0], n, acc, from, i, in.loc);
            for (int64_t k = 0; k < n; ++k) any_undefined |= !acc[k];
          });
          // Defined values scattered at run-time rows: the destination
          // counts as defined throughout (a result a loop of such stores
          // fills, read back afterwards, is not refused; a read of a row no
          // store reached is not caught).
          if (!any_undefined && idx_ok) {
            undefinedCount(in.dst.buffer) = 0;
            std::vector<uint8_t>().swap(shadow_[in.dst.buffer]);
          }
        } else {
          const Access* dd[1] = {&in.dst};
          forEachRow(in.dst, dd, 1, [&](const int64_t* off, int64_t n) {
            uint8_t* out = row(1, n);
            std::fill(out, out + n, idx_ok);
            writeRow(in.dst, off[0], n, out);
          });
        }
        break;
      }
      case Op::kTranspose: {
        Access t = in.src[0];
        std::swap(t.size[0], t.size[1]);
        std::swap(t.stride[0], t.stride[1]);
        const Access* acc[2] = {&in.dst, &t};
        forEachRow(in.dst, acc, 2, [&](const int64_t* off, int64_t n) {
          uint8_t* out = row(0, n);
          std::fill(out, out + n, 1);
          andRow(t, off[1], n, out, from, i, in.loc);
          for (int64_t k = 0; k < n; ++k) any_undefined |= !out[k];
          writeRow(in.dst, off[0], n, out);
        });
        break;
      }
      default: {
        // Element-wise: position by position over the operands it reads
        // (an affine operand is always defined).
        const Access* acc[4] = {&in.dst, &in.src[0], &in.src[1], &in.src[2]};
        if (rng_undefined && from.instruction < 0) from = rng_origin_;
        forEachRow(in.dst, acc, 4, [&](const int64_t* off, int64_t n) {
          uint8_t* out = row(0, n);
          std::fill(out, out + n, rng_undefined ? 0 : 1);
          for (int s = 0; s < 3; ++s)
            if (roles.reads[s])
              andRow(in.src[s], off[s + 1], n, out, from, i, in.loc);
          for (int64_t k = 0; k < n; ++k) any_undefined |= !out[k];
          writeRow(in.dst, off[0], n, out);
        });
      }
    }
    if (any_undefined) taint(in, from);
  }

  const Program& p_;
  std::vector<std::vector<uint8_t>> shadow_;
  std::vector<int64_t> undefined_;
  std::vector<uint8_t> counted_;
  std::vector<Origin> origin_;
  // Set while the random state comes from an undefined seed: where that
  // seed was read.
  Origin rng_origin_;
  // Kernel tensors that received undefined values: where from, and the store.
  struct Pending {
    Origin from;
    int32_t store_loc = -1;
  };
  std::vector<Pending> pending_;
  uint8_t mx_loaded_[kMaxCores] = {1, 1};  // the loaded MX stationary
  Origin mx_loaded_from_[kMaxCores];
  std::vector<uint8_t> rows_[3];
};

}  // namespace

void checkDefinedness(const Program& program) {
  DefinednessPass(program).run();
}

}  // namespace nki
}  // namespace neuron_rt
