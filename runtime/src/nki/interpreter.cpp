// Program::run: executes a checked tile program over device memory, one
// instruction after the other, each on fp32 rows (the engines' datapath)
// converted from and to the tiles' dtypes.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "neuron_runtime/nki/access_rows.h"
#include "neuron_runtime/nki/bitcast.h"
#include "neuron_runtime/nki/control_flow.h"
#include "neuron_runtime/nki/mx.h"
#include "neuron_runtime/nki/program.h"
#include "neuron_runtime/nki/tile_math.h"

namespace neuron_rt {
namespace nki {

class Interpreter {
 public:
  Interpreter(const Program& p, void* const* ext) : p_(p) {
    const auto& bufs = p.buffers_;
    // The tiles' memory: kept per thread across runs (a stream's worker
    // runs kernel after kernel), never cleared (no read precedes a write).
    thread_local std::vector<char> scratch;
    if (scratch.size() < static_cast<size_t>(p.scratch_bytes_) + 64)
      scratch.resize(static_cast<size_t>(p.scratch_bytes_) + 64);
    char* const scratch_base = scratch.data();
    base_.resize(bufs.size(), nullptr);
    for (size_t b = 0; b < bufs.size(); ++b) {
      if (bufs[b].external >= 0) {
        base_[b] = static_cast<char*>(ext[bufs[b].external]);
      } else if (p.scratch_offset_[b] >= 0) {
        base_[b] = scratch_base + p.scratch_offset_[b];
      }
    }
  }

  void run() {
    const auto& ins = p_.instructions_;
    const int64_t n = static_cast<int64_t>(ins.size());
    int64_t backward = 0;  // branches taken backwards (loop iterations)
    for (int64_t i = 0; i < n;) {
      index_ = i;
      if (path_ != nullptr) path_->push_back(static_cast<int32_t>(i));
      if (ins[i].op != Op::kBranch) {
        step(ins[i]);
        ++i;
        continue;
      }
      const int64_t next = branchTarget(ins[i], i, regs_);
      if (next <= i && ++backward > kMaxBackwardBranches)
        throw ProgramError(ins[i].loc, i,
                           "a loop ran more than 2^28 iterations (its "
                           "condition never became zero?)");
      i = next;
    }
  }

 private:
  struct Row {
    char* ptr;
    int64_t stride;
    DType dtype;
  };

  DType dtypeOf(const Access& a) const { return p_.buffers_[a.buffer].dtype; }
  char* address(const Access& a, int64_t off) const {
    return base_[a.buffer] + off * elementSize(dtypeOf(a));
  }

  float* buf(int k, int64_t n) {
    auto& v = rows_[k];
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
    return v.data();
  }

  void load(const Access& a, int64_t off, int64_t n, float* out) const {
    loadRow(dtypeOf(a), address(a, off), innerStride(a), n, out);
  }
  void store(const Access& a, int64_t off, int64_t n, const float* in) const {
    storeRow(dtypeOf(a), address(a, off), innerStride(a), n, in);
  }

  void step(const Instruction& in) {
    switch (in.op) {
      case Op::kCopy:
        return copy(in.dst, in.src[0]);
      case Op::kTranspose: {
        Access t = in.src[0];
        std::swap(t.size[0], t.size[1]);
        std::swap(t.stride[0], t.stride[1]);
        return copy(in.dst, t);
      }
      case Op::kMatmul:
        return matmul(in);
      case Op::kReduce:
        return reduce(in);
      case Op::kBnStats:
        return bnStats(in);
      case Op::kBnAggr:
        return bnAggr(in);
      case Op::kScan:
        return scan(in);
      case Op::kGather:
        return gather(in);
      case Op::kDmaDynamic:
        return dmaDynamic(in);
      case Op::kMax8:
      case Op::kFindIndex8:
      case Op::kMatchReplace8:
        return search(in);
      case Op::kNonzeroWithCount:
        return nonzeroWithCount(in);
      case Op::kRandomSeed:
        return randomSeed(in);
      case Op::kRandom:
        return uniform(in);
      case Op::kDropout:
        return dropout(in);
      case Op::kQuantizeMx:
        return mxQuantize(in, p_.buffers_, base_.data());
      case Op::kRawCopy:
        return rawCopy(in, p_.buffers_, base_.data());
      case Op::kMxLoadStationary:
        return mxLoadStationary(in, p_.buffers_, base_.data(),
                                mx_[p_.buffers_[in.src[0].buffer].core]);
      case Op::kMatmulMx:
        return mxMatmul(in, p_.buffers_, base_.data(),
                        mx_[p_.buffers_[in.dst.buffer].core]);
      case Op::kScalar: {
        const Access &s = in.src[0], &d = in.dst;
        return runScalar(in, index_, regs_,
                         s.buffer >= 0 ? address(s, s.offset) : nullptr,
                         s.buffer >= 0 ? dtypeOf(s) : DType::kI32,
                         d.buffer >= 0 ? address(d, d.offset) : nullptr,
                         d.buffer >= 0 ? dtypeOf(d) : DType::kI32);
      }
      default:
        return elementwise(in);
    }
  }

  void copy(const Access& dst, const Access& src) {
    const Access* acc[2] = {&dst, &src};
    const DType dt = dtypeOf(dst), st = dtypeOf(src);
    const int es = elementSize(dt);
    forEachRow(dst, acc, 2, [&](const int64_t* off, int64_t n) {
      if (dt == st && innerStride(dst) == 1 && innerStride(src) == 1) {
        std::memmove(address(dst, off[0]), address(src, off[1]), n * es);
        return;
      }
      if (dt == st && isMxPacked(dt)) {  // no fp32 form: their bits
        for (int64_t k = 0; k < n; ++k)
          std::memmove(address(dst, off[0] + k * innerStride(dst)),
                       address(src, off[1] + k * innerStride(src)), es);
        return;
      }
      float* r = buf(0, n);
      load(src, off[1], n, r);
      store(dst, off[0], n, r);
    });
  }

  // Vector/Scalar/GpSimd instructions over operands of the destination's
  // shape.
  void elementwise(const Instruction& in) {
    const Access& dst = in.dst;
    const Access* acc[4] = {&dst, &in.src[0], &in.src[1], &in.src[2]};
    const Access& a0 = in.src[0];
    forEachRow(dst, acc, 4, [&](const int64_t* off, int64_t n) {
      float* out = buf(0, n);
      float* x = buf(1, n);
      float* y = buf(2, n);
      float* z = buf(3, n);
      auto operand = [&](int s, float* into, bool imm, double value) {
        if (imm) {
          std::fill(into, into + n, static_cast<float>(value));
        } else {
          load(in.src[s], off[s + 1], n, into);
        }
      };
      switch (in.op) {
        case Op::kTensorTensor:
          load(in.src[0], off[1], n, x);
          load(in.src[1], off[2], n, y);
          applyAlu(in.alu0, x, y, out, n);
          break;
        case Op::kTensorScalar: {
          load(in.src[0], off[1], n, x);
          operand(1, y, in.flags & kFlagOperand0Imm, in.imm[0]);
          if (in.flags & kFlagReverse0) {
            applyAlu(in.alu0, y, x, out, n);
          } else {
            applyAlu(in.alu0, x, y, out, n);
          }
          if (in.alu1 != Alu::kBypass) {
            operand(2, z, in.flags & kFlagOperand1Imm, in.imm[1]);
            if (in.flags & kFlagReverse1) {
              applyAlu(in.alu1, z, out, out, n);
            } else {
              applyAlu(in.alu1, out, z, out, n);
            }
          }
          break;
        }
        case Op::kActivation: {
          load(in.src[0], off[1], n, x);
          operand(1, y, in.flags & kFlagOperand0Imm, in.imm[0]);
          operand(2, z, in.flags & kFlagOperand1Imm, in.imm[1]);
          for (int64_t k = 0; k < n; ++k) x[k] = x[k] * y[k] + z[k];
          applyActivation(in.act, x, out, n);
          break;
        }
        case Op::kIota: {
          // The affine expression's value at this row.
          // off[1] is offset + sum(idx * stride) over the outer dims.
          const int64_t base = off[1];
          const int64_t st = innerStride(a0);
          for (int64_t k = 0; k < n; ++k)
            out[k] = static_cast<float>(base + k * st);
          break;
        }
        case Op::kMemset:
          std::fill(out, out + n, static_cast<float>(in.imm[0]));
          break;
        case Op::kSelect:
          load(in.src[0], off[1], n, x);
          load(in.src[1], off[2], n, y);
          load(in.src[2], off[3], n, z);
          for (int64_t k = 0; k < n; ++k) out[k] = x[k] != 0 ? y[k] : z[k];
          break;
        case Op::kAffineSelect: {
          load(in.src[0], off[1], n, x);
          const int64_t base = off[3];
          const int64_t st = innerStride(in.src[2]);
          const float other = static_cast<float>(in.imm[0]);
          // alu0 compares the affine value with 0 (>= for the legacy
          // predicate form).
          for (int64_t k = 0; k < n; ++k)
            out[k] = aluScalar(in.alu0, static_cast<float>(base + k * st),
                               0.0f) != 0.0f
                         ? x[k]
                         : other;
          break;
        }
        default:
          return;
      }
      store(dst, off[0], n, out);
    });
  }

  void matmul(const Instruction& in) {
    const Access &st = in.src[0], &mv = in.src[1], &dst = in.dst;
    const int64_t K = st.size[0], M = st.size[1], N = mv.size[1];
    float* c = buf(2, M * N);
    const bool bf16 =
        dtypeOf(st) == DType::kBF16 && dtypeOf(mv) == DType::kBF16;
    if (!bf16 || !matmulBf16Kernel(
                     reinterpret_cast<const uint16_t*>(address(st, st.offset)),
                     st.stride[0], st.stride[1],
                     reinterpret_cast<const uint16_t*>(address(mv, mv.offset)),
                     mv.stride[0], mv.stride[1], c, K, M, N)) {
      float* s = buf(0, K * M);
      float* v = buf(1, K * N);
      for (int64_t k = 0; k < K; ++k) {
        loadRow(dtypeOf(st), address(st, st.offset + k * st.stride[0]),
                st.stride[1], M, s + k * M);
        loadRow(dtypeOf(mv), address(mv, mv.offset + k * mv.stride[0]),
                mv.stride[1], N, v + k * N);
      }
      matmulKernel(s, v, c, K, M, N);
    }
    const bool acc = in.flags & kFlagAccumulate;
    float* old = buf(3, N);
    for (int64_t m = 0; m < M; ++m) {
      float* row = c + m * N;
      char* p = address(dst, dst.offset + m * dst.stride[0]);
      if (acc) {
        loadRow(dtypeOf(dst), p, dst.stride[1], N, old);
        for (int64_t n = 0; n < N; ++n) row[n] += old[n];
      }
      storeRow(dtypeOf(dst), p, dst.stride[1], N, row);
    }
  }

  void reduce(const Instruction& in) {
    const Access &src = in.src[0], &dst = in.dst;
    const int keep = in.keep;
    // The kept part of the source is iterated like the destination; the
    // reduced part is a sub-access walked row by row.
    Access outer = src, inner = src;
    outer.ndim = keep;
    inner.ndim = src.ndim - keep;
    for (int d = 0; d < inner.ndim; ++d) {
      inner.size[d] = src.size[keep + d];
      inner.stride[d] = src.stride[keep + d];
    }
    const bool negate = in.flags & kFlagNegate;
    auto reduceAt = [&](int64_t src_off) {
      float r = reductionIdentity(in.alu0);
      Access sub = inner;
      sub.offset = src_off;
      if (sub.ndim == 0) {
        float x;
        loadRow(dtypeOf(src), address(src, src_off), 1, 1, &x);
        return aluScalar(in.alu0, r, x);
      }
      const Access* one[1] = {&sub};
      forEachRow(sub, one, 1, [&](const int64_t* off, int64_t n) {
        float* x = buf(1, n);
        loadRow(dtypeOf(src), address(src, off[0]), innerStride(sub), n, x);
        r = reduceAlu(in.alu0, r, x, n);
      });
      return r;
    };
    // Walk destination elements: treat both as rows of their last kept dim.
    if (keep == 0) {
      float r = reduceAt(src.offset);
      if (negate) r = -r;
      storeRow(dtypeOf(dst), address(dst, dst.offset), 1, 1, &r);
      return;
    }
    // One destination element at a time, walking the destination's rows.
    const Access* pair[2] = {&dst, &outer};
    forEachRow(dst, pair, 2, [&](const int64_t* off, int64_t n) {
      float* out = buf(0, n);
      const int64_t sst = outer.stride[keep - 1];
      for (int64_t k = 0; k < n; ++k) {
        const float r = reduceAt(off[1] + k * sst);
        out[k] = negate ? -r : r;
      }
      store(dst, off[0], n, out);
    });
  }

  void bnStats(const Instruction& in) {
    const Access &src = in.src[0], &dst = in.dst;
    const int64_t P = src.size[0], F = src.size[1];
    float* x = buf(1, F);
    float stats[6];
    for (int64_t p = 0; p < P; ++p) {
      loadRow(dtypeOf(src), address(src, src.offset + p * src.stride[0]),
              src.stride[1], F, x);
      double mean = 0;
      for (int64_t k = 0; k < F; ++k) mean += x[k];
      mean /= static_cast<double>(F);
      double m2 = 0;
      for (int64_t k = 0; k < F; ++k) m2 += (x[k] - mean) * (x[k] - mean);
      stats[0] = static_cast<float>(F);
      stats[1] = static_cast<float>(mean);
      stats[2] = static_cast<float>(m2);
      stats[3] = stats[4] = stats[5] = 0;
      storeRow(dtypeOf(dst), address(dst, dst.offset + p * dst.stride[0]),
               dst.stride[1], 6, stats);
    }
  }

  // Chan's parallel combination of (count, mean, M2) groups.
  void bnAggr(const Instruction& in) {
    const Access &src = in.src[0], &dst = in.dst;
    const int64_t P = src.size[0], W = src.size[1];
    float* x = buf(1, W);
    for (int64_t p = 0; p < P; ++p) {
      loadRow(dtypeOf(src), address(src, src.offset + p * src.stride[0]),
              src.stride[1], W, x);
      double n = 0, mean = 0, m2 = 0;
      for (int64_t g = 0; g < W / 6; ++g) {
        const double nb = x[g * 6], mb = x[g * 6 + 1], m2b = x[g * 6 + 2];
        if (nb <= 0) continue;
        const double tot = n + nb;
        const double delta = mb - mean;
        mean += delta * nb / tot;
        m2 += m2b + delta * delta * n * nb / tot;
        n = tot;
      }
      float out[2] = {static_cast<float>(mean),
                      static_cast<float>(n > 0 ? m2 / n : 0.0)};
      storeRow(dtypeOf(dst), address(dst, dst.offset + p * dst.stride[0]),
               dst.stride[1], 2, out);
    }
  }

  // NKI's order: op0 takes data0 first, the previous result second.
  void scan(const Instruction& in) {
    const Access &a = in.src[0], &b = in.src[1], &dst = in.dst;
    const Access& init = in.src[2];
    const bool initial_tile = in.flags & kFlagInitialTile;
    const int64_t P = dst.size[0], F = dst.size[1];
    float* x = buf(1, F);
    float* y = buf(2, F);
    float* out = buf(0, F);
    for (int64_t p = 0; p < P; ++p) {
      loadRow(dtypeOf(a), address(a, a.offset + p * a.stride[0]), a.stride[1],
              F, x);
      loadRow(dtypeOf(b), address(b, b.offset + p * b.stride[0]), b.stride[1],
              F, y);
      float prev = static_cast<float>(in.imm[0]);
      if (initial_tile)
        loadRow(dtypeOf(init), address(init, init.offset + p * init.stride[0]),
                1, 1, &prev);
      for (int64_t k = 0; k < F; ++k) {
        prev = aluScalar(in.alu1, aluScalar(in.alu0, x[k], prev), y[k]);
        out[k] = prev;
      }
      storeRow(dtypeOf(dst), address(dst, dst.offset + p * dst.stride[0]),
               dst.stride[1], F, out);
    }
  }

  // Tensor indirection: each group of 16 partitions reads its offsets from
  // its own 16 rows of the index tile, column by column.
  void gather(const Instruction& in) {
    const Access &data = in.src[0], &idx = in.src[1], &dst = in.dst;
    const int64_t P = dst.size[0], N = dst.size[1], C = data.size[1];
    const int64_t K = (N + kIndirectionGroup - 1) / kIndirectionGroup;
    float* offsets = buf(1, kIndirectionGroup * K);
    float* row = buf(2, C);
    float* out = buf(0, N);
    for (int64_t g = 0; g < P; g += kIndirectionGroup) {
      for (int64_t r = 0; r < kIndirectionGroup; ++r)
        loadRow(dtypeOf(idx),
                address(idx, idx.offset + (g + r) * idx.stride[0]),
                idx.stride[1], K, offsets + r * K);
      for (int64_t i = 0; i < N; ++i) {
        const int64_t r = i % kIndirectionGroup, k = i / kIndirectionGroup;
        const float o = offsets[r * K + k];
        if (!(o >= 0 && o < static_cast<float>(C)))
          throw ProgramError(in.loc, index_,
                             "tensor indirection: offset " +
                                 std::to_string(static_cast<int64_t>(o)) +
                                 " (index tile [" + std::to_string(g + r) +
                                 ", " + std::to_string(k) + "], element " +
                                 std::to_string(i) + " of partitions " +
                                 std::to_string(g) + ".." +
                                 std::to_string(g + kIndirectionGroup - 1) +
                                 ") is outside the " + std::to_string(C) +
                                 " columns of the data tile");
      }
      for (int64_t p = g; p < g + kIndirectionGroup; ++p) {
        loadRow(dtypeOf(data), address(data, data.offset + p * data.stride[0]),
                data.stride[1], C, row);
        for (int64_t i = 0; i < N; ++i)
          out[i] = row[static_cast<int64_t>(
              offsets[(i % kIndirectionGroup) * K + i / kIndirectionGroup])];
        storeRow(dtypeOf(dst), address(dst, dst.offset + p * dst.stride[0]),
                 dst.stride[1], N, out);
      }
    }
  }

  // A DMA at an offset read at run time. The index is checked against the
  // indexed dimension (not only the buffer), so that an index past the end
  // of a row never wraps silently into the next one.
  void dmaDynamic(const Instruction& in) {
    const bool dyn_dst = in.flags & kFlagDynamicDst;
    const bool vector = in.flags & kFlagVectorOffset;
    const bool skip = in.flags & kFlagOobSkip;
    const Access& idx = in.src[1];
    const int64_t stride = static_cast<int64_t>(in.imm[0]);
    const int64_t limit = static_cast<int64_t>(in.imm[1]);
    const int64_t lo = static_cast<int64_t>(in.imm[2]);
    const int64_t hi = static_cast<int64_t>(in.imm[3]);
    const int64_t rows = vector ? in.dst.size[0] : 1;
    // Index values are integers (int32 / uint32 tiles): read exactly, not
    // through the fp32 datapath (which rounds past 2^24).
    auto indexAt = [&](int64_t r) -> int64_t {
      const char* p =
          address(idx, idx.offset + r * (vector ? idx.stride[0] : 0));
      switch (dtypeOf(idx)) {
        case DType::kI32: {
          int32_t v;
          std::memcpy(&v, p, sizeof v);
          return v;
        }
        case DType::kU32: {
          uint32_t v;
          std::memcpy(&v, p, sizeof v);
          return v;
        }
        default: {
          float v;
          loadRow(dtypeOf(idx), p, 1, 1, &v);
          return static_cast<int64_t>(v);
        }
      }
    };
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t v = indexAt(r);
      if (v + lo < 0 || v + hi >= limit) {
        if (skip) continue;
        std::string what =
            "dynamic DMA: the index " + std::to_string(v) + " read at run time";
        if (vector) what += " (index tile row " + std::to_string(r) + ")";
        what += " selects positions " + std::to_string(v + lo) + ".." +
                std::to_string(v + hi) + " of dimension " +
                std::to_string(in.keep) + " of the " +
                (dyn_dst ? "destination" : "source") + ", which has size " +
                std::to_string(limit) + " (index out of bounds)";
        throw ProgramError(in.loc, index_, what);
      }
      Access d = in.dst, s = in.src[0];
      Access& moved = dyn_dst ? d : s;
      moved.offset += v * stride;
      if (vector) {  // this partition's row of both sides
        for (Access* a : {&d, &s}) {
          a->offset += r * a->stride[0];
          a->size[0] = 1;
        }
      }
      // Memory safety whatever the index arithmetic: the moved access
      // stays inside its buffer (the dimension check above implies it).
      int64_t first = moved.offset, last = moved.offset;
      for (int k = 0; k < moved.ndim; ++k) {
        const int64_t span = moved.stride[k] * (moved.size[k] - 1);
        (span < 0 ? first : last) += span;
      }
      if (moved.count() > 0 &&
          (first < 0 || last >= p_.buffers_[moved.buffer].elements))
        throw ProgramError(in.loc, index_,
                           "dynamic DMA: the index " + std::to_string(v) +
                               " moves the access outside its tensor");
      copy(d, s);
    }
  }

  // Partition p of `a` without its partition dim: its free elements.
  static Access partitionOf(const Access& a, int64_t p) {
    Access s;
    s.buffer = a.buffer;
    s.offset = a.offset + (a.ndim ? p * a.stride[0] : 0);
    s.ndim = a.ndim > 1 ? a.ndim - 1 : 1;
    s.size[0] = 1;
    s.stride[0] = 1;
    for (int d = 1; d < a.ndim; ++d) {
      s.size[d - 1] = a.size[d];
      s.stride[d - 1] = a.stride[d];
    }
    return s;
  }

  // The free elements of partition p of `a`, row-major, as fp32.
  void loadPartition(const Access& a, int64_t p, float* out) const {
    const Access s = partitionOf(a, p);
    const Access* one[1] = {&s};
    forEachRow(s, one, 1, [&](const int64_t* off, int64_t n) {
      load(s, off[0], n, out);
      out += n;
    });
  }
  void storePartition(const Access& a, int64_t p, const float* in) const {
    const Access s = partitionOf(a, p);
    const Access* one[1] = {&s};
    forEachRow(s, one, 1, [&](const int64_t* off, int64_t n) {
      store(s, off[0], n, in);
      in += n;
    });
  }
  // Integers (indices, counts) written exactly, not through fp32 (which
  // rounds past 2^24): wrapped to an integer type (kSearchNotFound is all
  // ones), converted to a float type.
  void storePartitionInts(const Access& a, int64_t p, const int64_t* in) const {
    const Access s = partitionOf(a, p);
    const DType t = dtypeOf(s);
    const int es = elementSize(t);
    const Access* one[1] = {&s};
    forEachRow(s, one, 1, [&](const int64_t* off, int64_t n) {
      const int64_t st = innerStride(s);
      for (int64_t k = 0; k < n; ++k, ++in) {
        char* q = address(s, off[0] + k * st);
        const uint64_t v = static_cast<uint64_t>(*in);
        if (isFloat(t)) {
          const float f = static_cast<float>(*in);
          storeRow(t, q, 1, 1, &f);
        } else if (t == DType::kBool) {
          const uint8_t b = *in != 0;
          std::memcpy(q, &b, 1);
        } else if (es == 4) {
          const uint32_t w = static_cast<uint32_t>(v);
          std::memcpy(q, &w, 4);
        } else if (es == 2) {
          const uint16_t w = static_cast<uint16_t>(v);
          std::memcpy(q, &w, 2);
        } else {
          const uint8_t w = static_cast<uint8_t>(v);
          std::memcpy(q, &w, 1);
        }
      }
    });
  }

  static int64_t freeCount(const Access& a) {
    int64_t n = 1;
    for (int d = 1; d < a.ndim; ++d) n *= a.size[d];
    return n;
  }

  // max8, nc_find_index8, nc_match_replace8: partition by partition, every
  // input read before anything is written (dst may be the data itself, as
  // NKI-lib's top-k replaces in place).
  void search(const Instruction& in) {
    const Access &data = in.src[0], &dst = in.dst;
    const int64_t P = dst.size[0], F = freeCount(data);
    float* x = buf(1, F);
    float* vals = buf(2, kSearchValues);
    int64_t pos[kSearchValues];
    for (int64_t p = 0; p < P; ++p) {
      loadPartition(data, p, x);
      if (in.op == Op::kMax8) {
        float top[kSearchValues];
        top8Descending(x, F, top);
        storePartition(dst, p, top);
        continue;
      }
      loadPartition(in.src[1], p, vals);
      const bool replace = in.op == Op::kMatchReplace8;
      matchPositions(x, F, vals, /*descending=*/replace, pos);
      if (!replace) {
        storePartitionInts(dst, p, pos);
        continue;
      }
      const float imm = static_cast<float>(in.imm[0]);
      for (int64_t i = 0; i < kSearchValues; ++i)
        if (pos[i] != kSearchNotFound) x[pos[i]] = imm;
      storePartition(dst, p, x);
      if (in.src[2].buffer >= 0) storePartitionInts(in.src[2], p, pos);
    }
  }

  // GpSimd nonzero_with_count: each core's first partition only.
  void nonzeroWithCount(const Instruction& in) {
    const Access &src = in.src[0], &dst = in.dst;
    const int64_t P = dst.size[0], T = freeCount(src);
    float* x = buf(1, T);
    std::vector<int64_t> out(static_cast<size_t>(T + 1));
    const int64_t offset = static_cast<int64_t>(in.imm[0]);
    const int64_t padding = static_cast<int64_t>(in.imm[1]);
    for (int64_t p = 0; p < P; p += kGpSimdCorePartitions) {
      loadPartition(src, p, x);
      nonzeroPositions(x, T, offset, padding, out.data());
      storePartitionInts(dst, p, out.data());
    }
  }

  // The run's random stream (program.h, Op::kRandomSeed): its key (a fresh
  // one at the first draw unless seeded first) and next position.
  uint64_t rngKey() {
    if (!rng_keyed_) {
      rng_key_ = freshRandomKey();
      rng_keyed_ = true;
    }
    return rng_key_;
  }

  void randomSeed(const Instruction& in) {
    uint32_t seed;
    if (in.flags & kFlagOperand0Imm) {
      seed = static_cast<uint32_t>(static_cast<int64_t>(in.imm[0]));
    } else {
      std::memcpy(&seed, address(in.src[0], in.src[0].offset), 4);
    }
    rng_key_ = randomKeyOfSeed(seed);
    rng_keyed_ = true;
    rng_position_ = 0;
  }

  // nl.rand: the next values of the stream, row by row of dst.
  void uniform(const Instruction& in) {
    const Access& dst = in.dst;
    const uint64_t key = rngKey();
    const int bits = significantBits(dtypeOf(dst));
    const Access* one[1] = {&dst};
    forEachRow(dst, one, 1, [&](const int64_t* off, int64_t n) {
      float* out = buf(0, n);
      uniformRow(key, rng_position_, n, bits, out);
      rng_position_ += static_cast<uint64_t>(n);
      store(dst, off[0], n, out);
    });
  }

  // nisa.dropout: an element is dropped when its uniform value is below its
  // partition's probability. Into dst of the data's type the kept elements
  // are copied as they are (integers past 2^24 too), else through fp32.
  void dropout(const Instruction& in) {
    const Access &dst = in.dst, &data = in.src[0], &prob = in.src[1];
    const uint64_t key = rngKey();
    const bool imm = in.flags & kFlagOperand0Imm;
    const bool same_type = dtypeOf(dst) == dtypeOf(data);
    const int es = elementSize(dtypeOf(dst));
    const int64_t dst_step = innerStride(dst), data_step = innerStride(data);
    const Access* acc[3] = {&dst, &data, &prob};
    forEachRow(dst, acc, imm ? 2 : 3, [&](const int64_t* off, int64_t n) {
      float* u = buf(0, n);
      uniformRow(key, rng_position_, n, 24, u);
      rng_position_ += static_cast<uint64_t>(n);
      float* p = buf(1, n);
      if (imm) {
        std::fill(p, p + n, static_cast<float>(in.imm[0]));
      } else {
        load(prob, off[2], n, p);
      }
      if (same_type) {
        for (int64_t k = 0; k < n; ++k) {
          char* q = address(dst, off[0] + k * dst_step);
          if (u[k] < p[k]) {
            std::memset(q, 0, static_cast<size_t>(es));
          } else {
            std::memmove(q, address(data, off[1] + k * data_step),
                         static_cast<size_t>(es));
          }
        }
        return;
      }
      float* x = buf(2, n);
      load(data, off[1], n, x);
      for (int64_t k = 0; k < n; ++k)
        if (u[k] < p[k]) x[k] = 0.0f;
      store(dst, off[0], n, x);
    });
  }

  const Program& p_;
  uint64_t rng_key_ = 0;
  bool rng_keyed_ = false;
  uint64_t rng_position_ = 0;
  int64_t index_ = 0;  // the instruction running (for run-time errors)
  RegisterFile regs_;  // the sequencers' scalar registers (control_flow.h)
  std::vector<int32_t>* path_ = nullptr;  // the instructions run, in order

 public:
  void recordPath(std::vector<int32_t>* path) { path_ = path; }
  std::vector<char*> base_;
  std::vector<float> rows_[4];
  MxStationary mx_[kMaxCores];  // each core's loaded MX stationary (mx.h)
};

void Program::run(void* const* external_addresses) const {
  Interpreter(*this, external_addresses).run();
}

void Program::run(void* const* external_addresses,
                  std::vector<int32_t>* path) const {
  Interpreter interpreter(*this, external_addresses);
  interpreter.recordPath(path);
  interpreter.run();
}

}  // namespace nki
}  // namespace neuron_rt
