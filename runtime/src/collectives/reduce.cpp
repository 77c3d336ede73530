#include "neuron_runtime/collectives/reduce.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "neuron_runtime/collectives/half.h"

namespace neuron_rt {
namespace collectives {
namespace {

// How an element type is loaded into its accumulator type and stored back.
// Converting types also convert whole blocks (loadBlock/storeBlock), which
// is where a hardware conversion can take over.
template <typename T_, typename Acc_>
struct Plain {
  using T = T_;
  using Acc = Acc_;
  static Acc load(T x) { return x; }
  static T store(Acc a) { return a; }
};

#if defined(__x86_64__)
// F16C converts 8 halves per instruction; the bit-twiddling software
// conversion is several times slower. Chosen at run time, so the build stays
// portable. Tails use the software conversion, which gives the same bits
// (NaNs included).
bool haveF16C() {
  static const bool yes =
      __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return yes;
}
__attribute__((target("avx,f16c"))) void halfToFloatF16C(const uint16_t* s,
                                                         float* d, size_t m) {
  size_t i = 0;
  for (; i + 8 <= m; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                reinterpret_cast<const __m128i*>(s + i))));
  for (; i < m; ++i) d[i] = halfToFloat(s[i]);
}
__attribute__((target("avx,f16c"))) void floatToHalfF16C(const float* s,
                                                         uint16_t* d,
                                                         size_t m) {
  size_t i = 0;
  for (; i + 8 <= m; i += 8)
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(d + i),
        _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < m; ++i) d[i] = floatToHalf(s[i]);
}
#endif

struct Half {
  using T = uint16_t;
  using Acc = float;
  static Acc load(T x) { return halfToFloat(x); }
  static T store(Acc a) { return floatToHalf(a); }
  static void loadBlock(const T* s, Acc* d, size_t m) {
#if defined(__x86_64__)
    if (haveF16C()) return halfToFloatF16C(s, d, m);
#endif
    for (size_t i = 0; i < m; ++i) d[i] = halfToFloat(s[i]);
  }
  static void storeBlock(const Acc* s, T* d, size_t m) {
#if defined(__x86_64__)
    if (haveF16C()) return floatToHalfF16C(s, d, m);
#endif
    for (size_t i = 0; i < m; ++i) d[i] = floatToHalf(s[i]);
  }
};
struct BFloat {
  using T = uint16_t;
  using Acc = float;
  static Acc load(T x) { return bf16ToFloat(x); }
  static T store(Acc a) { return floatToBf16(a); }
  static void loadBlock(const T* s, Acc* d, size_t m) {
    for (size_t i = 0; i < m; ++i) d[i] = bf16ToFloat(s[i]);
  }
  static void storeBlock(const Acc* s, T* d, size_t m) {
    for (size_t i = 0; i < m; ++i) d[i] = floatToBf16(s[i]);
  }
};
struct Bool {
  using T = uint8_t;
  using Acc = uint8_t;
  static Acc load(T x) { return x != 0; }
  static T store(Acc a) { return a; }
};

// Sources are combined a block at a time in an accumulator array that stays
// in L1: each source is streamed once and the output written once, and every
// loop is a plain element-wise loop the compiler vectorises.
constexpr size_t kBlock = 512;

// Same element and accumulator type: the last pass reads the final source
// and writes the output(s) in the same loop, so two sources (the common
// case) cost one pass.
template <class C, class Op, class Pre, class Post>
void kernelDirect(void* out, void* out2, const void* const* srcs, int n,
                  size_t count, Op op, Pre pre, Post post) {
  using T = typename C::T;
  using Acc = typename C::Acc;
  T* o = static_cast<T*>(out);
  T* o2 = static_cast<T*>(out2);
  auto src = [&](int k) { return static_cast<const T*>(srcs[k]); };
  Acc acc[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t m = std::min(kBlock, count - base);
    const T* s0 = src(0) + base;
    if (n == 1) {
      for (size_t i = 0; i < m; ++i) {
        const T r = C::store(post(pre(C::load(s0[i]))));
        o[base + i] = r;
        if (o2) o2[base + i] = r;
      }
      continue;
    }
    for (size_t i = 0; i < m; ++i) acc[i] = pre(C::load(s0[i]));
    for (int k = 1; k + 1 < n; ++k) {
      const T* s = src(k) + base;
      for (size_t i = 0; i < m; ++i) acc[i] = op(acc[i], pre(C::load(s[i])));
    }
    const T* s = src(n - 1) + base;
    if (o2) {
      for (size_t i = 0; i < m; ++i) {
        const T r = C::store(post(op(acc[i], pre(C::load(s[i])))));
        o[base + i] = r;
        o2[base + i] = r;
      }
    } else {
      for (size_t i = 0; i < m; ++i)
        o[base + i] = C::store(post(op(acc[i], pre(C::load(s[i])))));
    }
  }
}

// float16/bfloat16: convert each source block to float32, combine in
// float32, convert the result once. Every loop is a single simple step.
template <class C, class Op, class Pre, class Post>
void kernelConverting(void* out, void* out2, const void* const* srcs, int n,
                      size_t count, Op op, Pre pre, Post post) {
  using T = typename C::T;
  using Acc = typename C::Acc;
  T* o = static_cast<T*>(out);
  T* o2 = static_cast<T*>(out2);
  Acc acc[kBlock], tmp[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t m = std::min(kBlock, count - base);
    C::loadBlock(static_cast<const T*>(srcs[0]) + base, acc, m);
    for (size_t i = 0; i < m; ++i) acc[i] = pre(acc[i]);
    for (int k = 1; k < n; ++k) {
      C::loadBlock(static_cast<const T*>(srcs[k]) + base, tmp, m);
      for (size_t i = 0; i < m; ++i) acc[i] = op(acc[i], pre(tmp[i]));
    }
    for (size_t i = 0; i < m; ++i) acc[i] = post(acc[i]);
    C::storeBlock(acc, o + base, m);
    if (o2) std::memcpy(o2 + base, o + base, m * sizeof(T));
  }
}

template <class C, class Op, class Pre, class Post>
void kernel(void* out, void* out2, const void* const* srcs, int n, size_t count,
            Op op, Pre pre, Post post) {
  if constexpr (std::is_same_v<typename C::T, typename C::Acc>)
    kernelDirect<C>(out, out2, srcs, n, count, op, pre, post);
  else
    kernelConverting<C>(out, out2, srcs, n, count, op, pre, post);
}

struct Identity {
  template <typename A>
  A operator()(A a) const {
    return a;
  }
};

// Integer sums and products wrap (two's complement) instead of being UB.
template <typename A>
using Wide = std::make_unsigned_t<A>;

template <class C>
void floatingOp(ReduceOp op, void* out, void* out2, const void* const* srcs,
                int n, size_t count, double factor, int avg_divisor) {
  using A = typename C::Acc;
  Identity id;
  switch (op) {
    case ReduceOp::kSum:
      return kernel<C>(
          out, out2, srcs, n, count, [](A a, A b) { return a + b; }, id, id);
    case ReduceOp::kProduct:
      return kernel<C>(
          out, out2, srcs, n, count, [](A a, A b) { return a * b; }, id, id);
    case ReduceOp::kMin:
      // NaN propagates: a NaN accumulator stays, a NaN source replaces it.
      return kernel<C>(
          out, out2, srcs, n, count,
          [](A a, A b) { return (b < a || b != b) ? b : a; }, id, id);
    case ReduceOp::kMax:
      return kernel<C>(
          out, out2, srcs, n, count,
          [](A a, A b) { return (b > a || b != b) ? b : a; }, id, id);
    case ReduceOp::kAvg: {
      const A d = static_cast<A>(avg_divisor);
      return kernel<C>(
          out, out2, srcs, n, count, [](A a, A b) { return a + b; }, id,
          [d](A a) { return a / d; });
    }
    case ReduceOp::kPremulSum: {
      const A f = static_cast<A>(factor);
      return kernel<C>(
          out, out2, srcs, n, count, [](A a, A b) { return a + b; },
          [f](A a) { return a * f; }, id);
    }
    default:
      return;  // rejected by checkReduce
  }
}

// AVG of integers, as NCCL's: the wrapping sum, then one C integer division
// by the world size (truncating toward zero), in 64 bits so that a divisor
// above the type's range (e.g. 300 ranks of uint8) is still exact.
template <typename A>
A truncatingDivide(A sum, int divisor) {
  if constexpr (std::is_signed_v<A>)
    return static_cast<A>(static_cast<int64_t>(sum) / divisor);
  else
    return static_cast<A>(static_cast<uint64_t>(sum) /
                          static_cast<uint64_t>(divisor));
}

template <class C>
void integerOp(ReduceOp op, void* out, void* out2, const void* const* srcs,
               int n, size_t count, int avg_divisor) {
  using A = typename C::Acc;
  Identity id;
  auto wrapping_sum = [](A a, A b) {
    return static_cast<A>(Wide<A>(a) + Wide<A>(b));
  };
  switch (op) {
    case ReduceOp::kSum:
      return kernel<C>(out, out2, srcs, n, count, wrapping_sum, id, id);
    case ReduceOp::kAvg: {
      const int d = avg_divisor;
      return kernel<C>(out, out2, srcs, n, count, wrapping_sum, id,
                       [d](A a) { return truncatingDivide(a, d); });
    }
    case ReduceOp::kProduct:
      return kernel<C>(
          out, out2, srcs, n, count,
          [](A a, A b) { return static_cast<A>(Wide<A>(a) * Wide<A>(b)); }, id,
          id);
    case ReduceOp::kMin:
      return kernel<C>(
          out, out2, srcs, n, count, [](A a, A b) { return b < a ? b : a; }, id,
          id);
    case ReduceOp::kMax:
      return kernel<C>(
          out, out2, srcs, n, count, [](A a, A b) { return b > a ? b : a; }, id,
          id);
    case ReduceOp::kBand:
      return kernel<C>(
          out, out2, srcs, n, count,
          [](A a, A b) { return static_cast<A>(a & b); }, id, id);
    case ReduceOp::kBor:
      return kernel<C>(
          out, out2, srcs, n, count,
          [](A a, A b) { return static_cast<A>(a | b); }, id, id);
    case ReduceOp::kBxor:
      return kernel<C>(
          out, out2, srcs, n, count,
          [](A a, A b) { return static_cast<A>(a ^ b); }, id, id);
    default:
      return;  // rejected by checkReduce
  }
}

void boolOp(ReduceOp op, void* out, void* out2, const void* const* srcs, int n,
            size_t count) {
  using A = uint8_t;
  Identity id;
  auto band = [](A a, A b) { return static_cast<A>(a & b); };
  auto bor = [](A a, A b) { return static_cast<A>(a | b); };
  switch (op) {
    case ReduceOp::kSum:  // logical or, as torch sums bools
    case ReduceOp::kMax:
    case ReduceOp::kBor:
      return kernel<Bool>(out, out2, srcs, n, count, bor, id, id);
    case ReduceOp::kProduct:
    case ReduceOp::kMin:
    case ReduceOp::kBand:
      return kernel<Bool>(out, out2, srcs, n, count, band, id, id);
    case ReduceOp::kBxor:
      return kernel<Bool>(
          out, out2, srcs, n, count,
          [](A a, A b) { return static_cast<A>(a ^ b); }, id, id);
    default:
      return;  // rejected by checkReduce
  }
}

}  // namespace

std::string checkReduce(DataType dtype, ReduceOp op) {
  const bool fp = isFloating(dtype);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kProduct:
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return {};
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      if (fp)
        return std::string("reduce op ") + reduceOpName(op) +
               " is only defined for integer and bool tensors, not " +
               dtypeName(dtype);
      return {};
    case ReduceOp::kAvg:
      // Integers: the sum divided with truncation, as NCCL's average.
      if (dtype == DataType::kBool)
        return "reduce op AVG is not defined for bool tensors (as in NCCL)";
      return {};
    case ReduceOp::kPremulSum:
      if (!fp)
        return std::string("reduce op ") + reduceOpName(op) +
               " is only defined for floating-point tensors, not " +
               dtypeName(dtype) + " (as in NCCL); use SUM and divide";
      return {};
  }
  return "unknown reduce op";
}

void reduceInto(DataType dtype, ReduceOp op, void* out, void* out2,
                const void* const* srcs, int n, size_t count, double factor,
                int avg_divisor) {
  if (count == 0 || n <= 0) return;
  switch (dtype) {
    case DataType::kFloat32:
      return floatingOp<Plain<float, float>>(op, out, out2, srcs, n, count,
                                             factor, avg_divisor);
    case DataType::kFloat64:
      return floatingOp<Plain<double, double>>(op, out, out2, srcs, n, count,
                                               factor, avg_divisor);
    case DataType::kFloat16:
      return floatingOp<Half>(op, out, out2, srcs, n, count, factor,
                              avg_divisor);
    case DataType::kBFloat16:
      return floatingOp<BFloat>(op, out, out2, srcs, n, count, factor,
                                avg_divisor);
    case DataType::kInt8:
      return integerOp<Plain<int8_t, int8_t>>(op, out, out2, srcs, n, count,
                                              avg_divisor);
    case DataType::kInt16:
      return integerOp<Plain<int16_t, int16_t>>(op, out, out2, srcs, n, count,
                                                avg_divisor);
    case DataType::kInt32:
      return integerOp<Plain<int32_t, int32_t>>(op, out, out2, srcs, n, count,
                                                avg_divisor);
    case DataType::kInt64:
      return integerOp<Plain<int64_t, int64_t>>(op, out, out2, srcs, n, count,
                                                avg_divisor);
    case DataType::kUInt8:
      return integerOp<Plain<uint8_t, uint8_t>>(op, out, out2, srcs, n, count,
                                                avg_divisor);
    case DataType::kBool:
      return boolOp(op, out, out2, srcs, n, count);
  }
}

}  // namespace collectives
}  // namespace neuron_rt
