#include "neuron_runtime/nki/tile_math.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "neuron_runtime/nki/parallel.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

// Hot loops get an AVX-512 and an AVX2 clone picked at load time, so the
// library runs on any x86-64 and fast on the machines it is built for.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define NKI_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define NKI_CLONES
#endif

namespace neuron_rt {
namespace nki {
namespace {

int32_t asInt(float f) { return static_cast<int32_t>(f); }

float gelu(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678f)); }
float geluTanh(float x) {
  const float c = 0.7978845608f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + std::tanh(c * (x + 0.044715f * x * x * x)));
}
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

NKI_CLONES void expRow(const float* in, float* out, int64_t n) {
  for (int64_t k = 0; k < n; ++k) out[k] = std::exp(in[k]);
}

}  // namespace

float aluScalar(Alu op, float a, float b) {
  switch (op) {
    case Alu::kBypass:
      return a;
    case Alu::kAdd:
      return a + b;
    case Alu::kSubtract:
      return a - b;
    case Alu::kMultiply:
      return a * b;
    case Alu::kDivide:
      return a / b;
    case Alu::kMax:
      return std::isnan(a) || a > b ? a : b;
    case Alu::kMin:
      return std::isnan(a) || a < b ? a : b;
    case Alu::kPow:
      return std::pow(a, b);
    case Alu::kMod:
      return std::fmod(a, b);
    case Alu::kEqual:
      return a == b;
    case Alu::kNotEqual:
      return a != b;
    case Alu::kGreater:
      return a > b;
    case Alu::kGreaterEqual:
      return a >= b;
    case Alu::kLess:
      return a < b;
    case Alu::kLessEqual:
      return a <= b;
    case Alu::kLogicalAnd:
      return (a != 0) && (b != 0);
    case Alu::kLogicalOr:
      return (a != 0) || (b != 0);
    case Alu::kLogicalXor:
      return (a != 0) != (b != 0);
    case Alu::kBitwiseAnd:
      return static_cast<float>(asInt(a) & asInt(b));
    case Alu::kBitwiseOr:
      return static_cast<float>(asInt(a) | asInt(b));
    case Alu::kBitwiseXor:
      return static_cast<float>(asInt(a) ^ asInt(b));
    case Alu::kLeftShift:
      return static_cast<float>(static_cast<int32_t>(
          static_cast<uint32_t>(asInt(a)) << (asInt(b) & 31)));
    case Alu::kRightShift:
      return static_cast<float>(asInt(a) >> (asInt(b) & 31));
    case Alu::kAbsMax:
      return std::max(std::fabs(a), std::fabs(b));
    default:
      return a;
  }
}

NKI_CLONES void applyAlu(Alu op, const float* a, const float* b, float* out,
                         int64_t n) {
  switch (op) {
    case Alu::kAdd:
      for (int64_t k = 0; k < n; ++k) out[k] = a[k] + b[k];
      return;
    case Alu::kSubtract:
      for (int64_t k = 0; k < n; ++k) out[k] = a[k] - b[k];
      return;
    case Alu::kMultiply:
      for (int64_t k = 0; k < n; ++k) out[k] = a[k] * b[k];
      return;
    case Alu::kDivide:
      for (int64_t k = 0; k < n; ++k) out[k] = a[k] / b[k];
      return;
    case Alu::kMax:
      for (int64_t k = 0; k < n; ++k) out[k] = a[k] > b[k] ? a[k] : b[k];
      for (int64_t k = 0; k < n; ++k)
        if (std::isnan(a[k]) || std::isnan(b[k]))
          out[k] = std::numeric_limits<float>::quiet_NaN();
      return;
    case Alu::kMin:
      for (int64_t k = 0; k < n; ++k) out[k] = a[k] < b[k] ? a[k] : b[k];
      for (int64_t k = 0; k < n; ++k)
        if (std::isnan(a[k]) || std::isnan(b[k]))
          out[k] = std::numeric_limits<float>::quiet_NaN();
      return;
    case Alu::kBypass:
      if (out != a) std::memmove(out, a, n * sizeof(float));
      return;
    default:
      for (int64_t k = 0; k < n; ++k) out[k] = aluScalar(op, a[k], b[k]);
  }
}

float reductionIdentity(Alu op) {
  switch (op) {
    case Alu::kMultiply:
      return 1.0f;
    case Alu::kMax:
      return -std::numeric_limits<float>::infinity();
    case Alu::kMin:
      return std::numeric_limits<float>::infinity();
    case Alu::kLogicalAnd:
      return 1.0f;
    case Alu::kBitwiseAnd:
      return static_cast<float>(-1);
    default:
      return 0.0f;
  }
}

NKI_CLONES float reduceAlu(Alu op, float acc, const float* x, int64_t n) {
  switch (op) {
    case Alu::kAdd: {
      float s = 0;
      for (int64_t k = 0; k < n; ++k) s += x[k];
      return acc + s;
    }
    case Alu::kMax:
    case Alu::kMin: {
      // Branch-free (vectorised) with a NaN check beside it: NaN wins.
      const bool is_max = op == Alu::kMax;
      float m = acc;
      bool nan = false;
      for (int64_t k = 0; k < n; ++k) {
        m = is_max ? (x[k] > m ? x[k] : m) : (x[k] < m ? x[k] : m);
        nan |= x[k] != x[k];
      }
      return nan ? std::numeric_limits<float>::quiet_NaN() : m;
    }
    default:
      for (int64_t k = 0; k < n; ++k) acc = aluScalar(op, acc, x[k]);
      return acc;
  }
}

void applyActivation(Act f, const float* in, float* out, int64_t n) {
  switch (f) {
    case Act::kIdentity:
      if (out != in) std::memmove(out, in, n * sizeof(float));
      return;
    case Act::kExp:
      expRow(in, out, n);
      return;
    default:
      break;
  }
  for (int64_t k = 0; k < n; ++k) {
    const float x = in[k];
    float y;
    switch (f) {
      case Act::kLog:
        y = std::log(x);
        break;
      case Act::kTanh:
        y = std::tanh(x);
        break;
      case Act::kSigmoid:
        y = sigmoid(x);
        break;
      case Act::kRelu:
        y = x > 0 ? x : 0.0f;
        break;
      case Act::kGelu:
        y = gelu(x);
        break;
      case Act::kGeluTanh:
        y = geluTanh(x);
        break;
      case Act::kSilu:
        y = x * sigmoid(x);
        break;
      case Act::kSqrt:
        y = std::sqrt(x);
        break;
      case Act::kRsqrt:
        y = 1.0f / std::sqrt(x);
        break;
      case Act::kReciprocal:
        y = 1.0f / x;
        break;
      case Act::kSquare:
        y = x * x;
        break;
      case Act::kAbs:
        y = std::fabs(x);
        break;
      case Act::kNegative:
        y = -x;
        break;
      case Act::kSign:
        y = static_cast<float>((x > 0) - (x < 0));
        break;
      case Act::kSin:
        y = std::sin(x);
        break;
      case Act::kCos:
        y = std::cos(x);
        break;
      case Act::kErf:
        y = std::erf(x);
        break;
      case Act::kSoftplus:
        y = std::log1p(std::exp(x));
        break;
      case Act::kMish:
        y = x * std::tanh(std::log1p(std::exp(x)));
        break;
      case Act::kArctan:
        y = std::atan(x);
        break;
      case Act::kCeil:
        y = std::ceil(x);
        break;
      case Act::kFloor:
        y = std::floor(x);
        break;
      case Act::kRound:
        y = std::nearbyint(x);
        break;
      case Act::kTrunc:
        y = std::trunc(x);
        break;
      case Act::kExp2:
        y = std::exp2(x);
        break;
      case Act::kLog2:
        y = std::log2(x);
        break;
      case Act::kTan:
        y = std::tan(x);
        break;
      case Act::kGeluDx: {
        const float cdf = 0.5f * (1.0f + std::erf(x * 0.70710678f));
        const float pdf = 0.39894228f * std::exp(-0.5f * x * x);
        y = cdf + x * pdf;
        break;
      }
      case Act::kSiluDx: {
        const float s = sigmoid(x);
        y = s * (1.0f + x * (1.0f - s));
        break;
      }
      default:
        y = x;
    }
    out[k] = y;
  }
}

namespace {

// Descending order with NaN first (a NaN compares above every number, as
// the ALU's maximum lets NaN win).
bool ranksAbove(float a, float b) {
  if (std::isnan(a)) return !std::isnan(b);
  if (std::isnan(b)) return false;
  return a > b;
}

}  // namespace

void top8Descending(const float* x, int64_t n, float* out) {
  thread_local std::vector<float> tmp;
  tmp.assign(x, x + n);
  const int64_t k = std::min<int64_t>(kSearchValues, n);
  std::partial_sort(tmp.begin(), tmp.begin() + k, tmp.end(), ranksAbove);
  std::copy(tmp.begin(), tmp.begin() + k, out);
}

void matchPositions(const float* x, int64_t n, const float* vals,
                    bool descending, int64_t* pos) {
  thread_local std::vector<uint8_t> taken;
  taken.assign(static_cast<size_t>(n), 0);
  for (int64_t j = 0; j < kSearchValues; ++j) {
    const int64_t i = descending ? kSearchValues - 1 - j : j;
    const float v = vals[i];
    pos[i] = kSearchNotFound;
    for (int64_t k = 0; k < n; ++k) {
      if (!taken[k] && x[k] == v) {
        taken[k] = 1;
        pos[i] = k;
        break;
      }
    }
  }
}

void nonzeroPositions(const float* x, int64_t n, int64_t offset,
                      int64_t padding, int64_t* out) {
  int64_t count = 0;
  for (int64_t k = 0; k < n; ++k)
    if (x[k] != 0) out[count++] = k + offset;
  for (int64_t k = count; k < n; ++k) out[k] = padding;
  out[n] = count;
}

namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// SplitMix64's output function (Steele, Lea and Flood 2014).
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t randomBits(uint64_t key, uint64_t position) {
  return mix64(key + (position + 1) * kGolden);
}

uint64_t randomKeyOfSeed(uint32_t seed) {
  return mix64(static_cast<uint64_t>(seed) ^ 0x6a09e667f3bcc909ULL);
}

uint64_t freshRandomKey() {
  static const uint64_t process = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
           static_cast<uint64_t>(
               std::chrono::steady_clock::now().time_since_epoch().count());
  }();
  static std::atomic<uint64_t> runs{0};
  const uint64_t k = runs.fetch_add(1, std::memory_order_relaxed);
  // A different odd multiplier than the stream's, so that keys are not
  // positions of one another's streams.
  return mix64(process ^ mix64((k + 1) * 0xd1b54a32d192ed03ULL));
}

void uniformRow(uint64_t key, uint64_t position, int64_t n, int bits,
                float* out) {
  const float scale = std::ldexp(1.0f, -bits);
  for (int64_t k = 0; k < n; ++k) {
    const uint64_t b = randomBits(key, position + static_cast<uint64_t>(k));
    out[k] = static_cast<float>(b >> (64 - bits)) * scale;
  }
}

int significantBits(DType t) {
  switch (t) {
    case DType::kBF16:
      return 8;
    case DType::kF16:
      return 11;
    case DType::kF8E4M3FN:
    case DType::kF8E4M3:
      return 4;
    case DType::kF8E5M2:
      return 3;
    default:
      return 24;
  }
}

// Register-blocked: a 4 x 64 block of c stays in registers while k runs.
NKI_CLONES static void matmulRows(const float* s, const float* v, float* c,
                                  int64_t K, int64_t M, int64_t N, int64_t mb,
                                  int64_t me);

void matmulKernel(const float* s, const float* v, float* c, int64_t K,
                  int64_t M, int64_t N) {
  const int64_t blocks = (M + 3) / 4;
  const int64_t grain =
      std::max<int64_t>(1, (1 << 20) / std::max<int64_t>(1, 4 * K * N));
  parallelFor(0, blocks, grain, [&](int64_t b, int64_t e) {
    matmulRows(s, v, c, K, M, N, b * 4, std::min(M, e * 4));
  });
}

NKI_CLONES static void matmulRows(const float* s, const float* v, float* c,
                                  int64_t K, int64_t M, int64_t N, int64_t mb,
                                  int64_t me) {
  constexpr int64_t MR = 4, NR = 64;
  int64_t m0 = mb;
  for (; m0 + MR <= me; m0 += MR) {
    int64_t n0 = 0;
    for (; n0 + NR <= N; n0 += NR) {
      float acc[MR][NR] = {};
      for (int64_t k = 0; k < K; ++k) {
        const float* vr = v + k * N + n0;
        const float* sr = s + k * M + m0;
        for (int64_t i = 0; i < MR; ++i) {
          const float a = sr[i];
          for (int64_t j = 0; j < NR; ++j) acc[i][j] += a * vr[j];
        }
      }
      for (int64_t i = 0; i < MR; ++i)
        std::memcpy(c + (m0 + i) * N + n0, acc[i], NR * sizeof(float));
    }
    for (; n0 < N; ++n0)
      for (int64_t i = 0; i < MR; ++i) {
        float a = 0;
        for (int64_t k = 0; k < K; ++k) a += s[k * M + m0 + i] * v[k * N + n0];
        c[(m0 + i) * N + n0] = a;
      }
  }
  for (; m0 < me; ++m0) {
    float* cr = c + m0 * N;
    for (int64_t n = 0; n < N; ++n) cr[n] = 0;
    for (int64_t k = 0; k < K; ++k) {
      const float a = s[k * M + m0];
      const float* vr = v + k * N;
      for (int64_t n = 0; n < N; ++n) cr[n] += a * vr[n];
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
namespace {

// Pairs along k: p[kp * n + j] = (x[2kp][j], x[2kp + 1][j]) as one 32-bit
// lane (k odd: the last pair's upper half is 0), the layout of vdpbf16ps.
void packPairs(const uint16_t* x, int64_t row, int64_t col, int64_t K,
               int64_t n, uint32_t* p) {
  const int64_t KP = (K + 1) / 2;
  for (int64_t kp = 0; kp < KP; ++kp) {
    const uint16_t* r0 = x + (2 * kp) * row;
    const bool has1 = 2 * kp + 1 < K;
    const uint16_t* r1 = x + (2 * kp + 1) * row;
    uint32_t* out = p + kp * n;
    if (col == 1 && has1) {
      for (int64_t j = 0; j < n; ++j)
        out[j] =
            static_cast<uint32_t>(r0[j]) | (static_cast<uint32_t>(r1[j]) << 16);
    } else {
      for (int64_t j = 0; j < n; ++j)
        out[j] = static_cast<uint32_t>(r0[j * col]) |
                 (has1 ? static_cast<uint32_t>(r1[j * col]) << 16 : 0u);
    }
  }
}

__attribute__((target("avx512f,avx512bf16"))) void bf16Block(
    const uint32_t* sp, const uint32_t* vp, float* c, int64_t KP, int64_t M,
    int64_t N) {
  constexpr int64_t MR = 4, NV = 4;  // 4 rows x 64 columns of c in registers
  int64_t m0 = 0;
  for (; m0 + MR <= M; m0 += MR) {
    int64_t n0 = 0;
    for (; n0 + 16 * NV <= N; n0 += 16 * NV) {
      __m512 acc[MR][NV];
      for (int64_t i = 0; i < MR; ++i)
        for (int64_t j = 0; j < NV; ++j) acc[i][j] = _mm512_setzero_ps();
      for (int64_t kp = 0; kp < KP; ++kp) {
        const uint32_t* vr = vp + kp * N + n0;
        __m512i b[NV];
        for (int64_t j = 0; j < NV; ++j)
          b[j] = _mm512_loadu_si512(reinterpret_cast<const void*>(vr + 16 * j));
        const uint32_t* sr = sp + kp * M + m0;
        for (int64_t i = 0; i < MR; ++i) {
          const __m512i a = _mm512_set1_epi32(static_cast<int>(sr[i]));
          for (int64_t j = 0; j < NV; ++j)
            acc[i][j] =
                _mm512_dpbf16_ps(acc[i][j], (__m512bh)a, (__m512bh)b[j]);
        }
      }
      for (int64_t i = 0; i < MR; ++i)
        for (int64_t j = 0; j < NV; ++j)
          _mm512_storeu_ps(c + (m0 + i) * N + n0 + 16 * j, acc[i][j]);
    }
    // Column tail, 16 at a time with a mask.
    for (; n0 < N; n0 += 16) {
      const __mmask16 mask =
          static_cast<__mmask16>(N - n0 >= 16 ? 0xffff : (1u << (N - n0)) - 1);
      __m512 acc[MR];
      for (int64_t i = 0; i < MR; ++i) acc[i] = _mm512_setzero_ps();
      for (int64_t kp = 0; kp < KP; ++kp) {
        const __m512i b = _mm512_maskz_loadu_epi32(mask, vp + kp * N + n0);
        const uint32_t* sr = sp + kp * M + m0;
        for (int64_t i = 0; i < MR; ++i)
          acc[i] = _mm512_dpbf16_ps(
              acc[i], (__m512bh)_mm512_set1_epi32(static_cast<int>(sr[i])),
              (__m512bh)b);
      }
      for (int64_t i = 0; i < MR; ++i)
        _mm512_mask_storeu_ps(c + (m0 + i) * N + n0, mask, acc[i]);
    }
  }
  // Row tail: one row at a time.
  for (; m0 < M; ++m0) {
    for (int64_t n0 = 0; n0 < N; n0 += 16) {
      const __mmask16 mask =
          static_cast<__mmask16>(N - n0 >= 16 ? 0xffff : (1u << (N - n0)) - 1);
      __m512 acc = _mm512_setzero_ps();
      for (int64_t kp = 0; kp < KP; ++kp)
        acc = _mm512_dpbf16_ps(
            acc, (__m512bh)_mm512_set1_epi32(static_cast<int>(sp[kp * M + m0])),
            (__m512bh)_mm512_maskz_loadu_epi32(mask, vp + kp * N + n0));
      _mm512_mask_storeu_ps(c + m0 * N + n0, mask, acc);
    }
  }
}

bool cpuHasBf16Dot() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
}

}  // namespace

bool matmulBf16Kernel(const uint16_t* s, int64_t s_row, int64_t s_col,
                      const uint16_t* v, int64_t v_row, int64_t v_col, float* c,
                      int64_t K, int64_t M, int64_t N) {
  if (!cpuHasBf16Dot()) return false;
  thread_local std::vector<uint32_t> sp, vp;
  const int64_t KP = (K + 1) / 2;
  sp.resize(static_cast<size_t>(KP * M));
  vp.resize(static_cast<size_t>(KP * N));
  packPairs(s, s_row, s_col, K, M, sp.data());
  packPairs(v, v_row, v_col, K, N, vp.data());
  // Blocks of 4 rows of c, over the host's cores where the embedder
  // installed a pool (nki/parallel.h).
  const uint32_t* spp = sp.data();
  const uint32_t* vpp = vp.data();
  const int64_t blocks = (M + 3) / 4;
  const int64_t grain =
      std::max<int64_t>(1, (1 << 20) / std::max<int64_t>(1, 4 * K * N));
  parallelFor(0, blocks, grain, [&](int64_t b, int64_t e) {
    const int64_t m0 = b * 4, m1 = std::min(M, e * 4);
    // Rows m0..m1 of c: the stationary's columns m0..m1 (pairs stay packed
    // with row stride M).
    thread_local std::vector<uint32_t> sub;
    sub.resize(static_cast<size_t>(KP * (m1 - m0)));
    for (int64_t kp = 0; kp < KP; ++kp)
      std::memcpy(sub.data() + kp * (m1 - m0), spp + kp * M + m0,
                  (m1 - m0) * sizeof(uint32_t));
    bf16Block(sub.data(), vpp, c + m0 * N, KP, m1 - m0, N);
  });
  return true;
}
#else
bool matmulBf16Kernel(const uint16_t*, int64_t, int64_t, const uint16_t*,
                      int64_t, int64_t, float*, int64_t, int64_t, int64_t) {
  return false;
}
#endif

}  // namespace nki
}  // namespace neuron_rt
