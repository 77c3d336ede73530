#include "neuron_runtime/nki/mx.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace neuron_rt {
namespace nki {

namespace {

int64_t freeCount(const Access& a) {
  int64_t n = 1;
  for (int d = 1; d < a.ndim; ++d) n *= a.size[d];
  return n;
}

// Element offsets of partition p's free elements, row-major.
void rowOffsets(const Access& a, int64_t p, std::vector<int64_t>& out) {
  const int64_t n = freeCount(a);
  out.resize(static_cast<size_t>(n));
  int64_t idx[kMaxDims] = {0, 0, 0, 0, 0};
  const int64_t base = a.offset + (a.ndim >= 1 ? p * a.stride[0] : 0);
  for (int64_t j = 0; j < n; ++j) {
    int64_t off = base;
    for (int d = 1; d < a.ndim; ++d) off += idx[d] * a.stride[d];
    out[static_cast<size_t>(j)] = off;
    for (int d = a.ndim - 1; d >= 1; --d) {
      if (++idx[d] < a.size[d]) break;
      idx[d] = 0;
    }
  }
}

int exponentField(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return static_cast<int>((bits >> 23) & 0xff);
}

// The largest exponent of each value type (OCP MX v1.0, table of emax):
// e4m3fn 8, e5m2 15, e2m1 2; and its largest finite value.
int emax(DType t) {
  return t == DType::kF8E5M2x4 ? 15 : t == DType::kF4E2M1FNx4 ? 2 : 8;
}
double maxFinite(DType t) {
  return t == DType::kF8E5M2x4     ? 57344.0
         : t == DType::kF4E2M1FNx4 ? 6.0
                                   : 448.0;
}

// 2^(s - 127) of an E8M0 scale; 0xff is its NaN.
float scaleValue(uint8_t s) {
  if (s == 0xff) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(s) - 127);
}

const float kFp4Values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

const char* mxName(DType t) { return dtypeName(t); }

}  // namespace

bool isMxPacked(DType t) {
  return t == DType::kF8E4M3FNx4 || t == DType::kF8E5M2x4 ||
         t == DType::kF4E2M1FNx4;
}

float mxDecode(DType t, const void* element, int q) {
  const uint8_t* b = static_cast<const uint8_t*>(element);
  if (t == DType::kF4E2M1FNx4) {
    const uint8_t nib = (b[q / 2] >> (4 * (q % 2))) & 0xf;
    const float v = kFp4Values[nib & 7];
    return (nib & 8) ? -v : v;
  }
  return t == DType::kF8E5M2x4 ? f8e5m2ToFloat(b[q]) : f8e4m3fnToFloat(b[q]);
}

uint8_t mxEncode(DType t, float x) {
  if (t == DType::kF8E5M2x4) return floatToF8e5m2(x);
  if (t == DType::kF8E4M3FNx4) return floatToF8e4m3fn(x);
  // E2M1: nearest of the eight magnitudes, ties to the even code.
  if (std::isnan(x)) return 0;
  const uint8_t sign = std::signbit(x) ? 8 : 0;
  const float a = std::min(std::fabs(x), 6.0f);
  int best = 0;
  for (int c = 1; c < 8; ++c) {
    const float d = std::fabs(kFp4Values[c] - a);
    const float db = std::fabs(kFp4Values[best] - a);
    if (d < db || (d == db && (c % 2) == 0)) best = c;
  }
  return sign | static_cast<uint8_t>(best);
}

uint8_t mxScale(DType t, int e) {
  return static_cast<uint8_t>(std::clamp(e - emax(t), 0, 254));
}

std::string mxCheck(const std::vector<Instruction>& ins, size_t at,
                    const std::vector<Buffer>& bufs) {
  const Instruction& in = ins[at];
  auto dt = [&](const Access& a) { return bufs[a.buffer].dtype; };
  auto shape = [](const Access& a) {
    std::string s = "[";
    for (int d = 0; d < a.ndim; ++d)
      s += (d ? ", " : "") + std::to_string(a.size[d]);
    return s + "]";
  };
  // The scales of partitions 0..p-1 fit in a tile of `rows` partitions.
  auto scalesFit = [](int64_t p, int64_t rows) {
    return p <= 0 || rows > mxScaleRow(p - 1);
  };
  switch (in.op) {
    case Op::kQuantizeMx: {
      const Access &d = in.dst, &s = in.src[0], &sc = in.src[2];
      if (in.engine != Engine::kVector) return "runs on the Vector engine only";
      if (sc.buffer < 0) return "has no scale destination";
      if (dt(d) != DType::kF8E4M3FNx4 && dt(d) != DType::kF8E5M2x4)
        return std::string("writes float8_e4m3fn_x4 or float8_e5m2_x4, not ") +
               mxName(dt(d));
      if (dt(s) != DType::kBF16 && dt(s) != DType::kF16)
        return std::string("reads bfloat16 or float16, not ") + mxName(dt(s));
      if (dt(sc) != DType::kU8) return "writes uint8 scales";
      if (d.ndim < 1 || s.ndim < 1 || sc.ndim < 1 || s.size[0] != d.size[0])
        return "source " + shape(s) + " and destination " + shape(d) +
               " differ in partitions";
      if (d.size[0] % 8 != 0)
        return "partitions " + std::to_string(d.size[0]) +
               " are not groups of 8";
      if (freeCount(s) != 4 * freeCount(d))
        return "source " + shape(s) +
               " does not hold 4 values per element of " + shape(d);
      if (freeCount(sc) != freeCount(d) || !scalesFit(d.size[0], sc.size[0]))
        return "scales " + shape(sc) + " do not fit the destination " +
               shape(d);
      return "";
    }
    case Op::kMxLoadStationary: {
      const Access &st = in.src[0], &sc = in.src[1];
      if (in.engine != Engine::kTensor) return "runs on the Tensor engine only";
      if (in.dst.buffer >= 0) return "writes no destination";
      if (!isMxPacked(dt(st)) || dt(sc) != DType::kU8)
        return "takes an MX x4 stationary and uint8 scales";
      if (st.ndim < 2 || sc.ndim < 1 || !scalesFit(st.size[0], sc.size[0]) ||
          freeCount(sc) < freeCount(st))
        return "stationary " + shape(st) + " and scales " + shape(sc) +
               " do not fit";
      return "";
    }
    case Op::kMatmulMx: {
      const Access &d = in.dst, &mv = in.src[0], &sc = in.src[1];
      if (in.engine != Engine::kTensor) return "runs on the Tensor engine only";
      if (bufs[d.buffer].space != Space::kPsum) return "writes PSUM only";
      if (dt(d) != DType::kF32 && dt(d) != DType::kBF16)
        return "writes float32 or bfloat16";
      if (!isMxPacked(dt(mv)) || dt(sc) != DType::kU8)
        return "takes an MX x4 moving matrix and uint8 scales";
      if (d.ndim < 2 || mv.ndim < 2 || sc.ndim < 1 ||
          !scalesFit(mv.size[0], sc.size[0]) || freeCount(sc) < freeCount(mv))
        return "moving " + shape(mv) + ", scales " + shape(sc) +
               " and destination " + shape(d) + " do not fit";
      const int32_t core = bufs[d.buffer].core;
      for (size_t j = at; j-- > 0;) {
        const Instruction& l = ins[j];
        if (l.op != Op::kMxLoadStationary || bufs[l.src[0].buffer].core != core)
          continue;
        if (l.src[0].size[0] != mv.size[0] ||
            freeCount(l.src[0]) != d.size[0] || freeCount(d) != freeCount(mv))
          return "stationary " + shape(l.src[0]) + " and moving " + shape(mv) +
                 " do not make the destination " + shape(d);
        return "";
      }
      return "has no stationary matrix loaded before it";
    }
    default:
      return "";
  }
}

void mxQuantize(const Instruction& in, const std::vector<Buffer>& bufs,
                char* const* base) {
  const Access &d = in.dst, &s = in.src[0], &sc = in.src[2];
  const DType t = bufs[d.buffer].dtype, st = bufs[s.buffer].dtype;
  const int ss = elementSize(st);
  const int64_t P = d.size[0], F = freeCount(d);
  const double vmax = maxFinite(t);
  std::vector<int64_t> src_off, dst_off, sc_off;
  std::vector<float> vals(static_cast<size_t>(8 * 4 * F));
  // The other partitions of each quadrant of the scale tile read as zeros
  // (NKI-lib's quantize_mx test: "4-31 0 (padding)" in the layout the
  // instruction stores); its first four hold the groups' scales (below).
  for (int64_t row = 0; row < sc.size[0]; ++row) {
    if (row % 32 < 4 || row / 32 >= (P + 31) / 32) continue;
    rowOffsets(sc, row, sc_off);
    for (int64_t j = 0; j < F; ++j)
      *reinterpret_cast<uint8_t*>(base[sc.buffer] + sc_off[j]) = 0;
  }
  for (int64_t g = 0; g < P / 8; ++g) {
    // The group's 8 partitions, as fp32.
    for (int64_t r = 0; r < 8; ++r) {
      rowOffsets(s, 8 * g + r, src_off);
      float* row = vals.data() + r * 4 * F;
      for (int64_t i = 0; i < 4 * F; ++i)
        loadRow(st, base[s.buffer] + src_off[i] * ss, 1, 1, row + i);
    }
    rowOffsets(sc, mxScaleRow(8 * g), sc_off);
    std::vector<uint8_t> scales(static_cast<size_t>(F));
    for (int64_t j = 0; j < F; ++j) {
      int e = 0;
      for (int64_t r = 0; r < 8; ++r)
        for (int q = 0; q < 4; ++q)
          e = std::max(e, exponentField(vals[r * 4 * F + 4 * j + q]));
      scales[j] = mxScale(t, e);
      *reinterpret_cast<uint8_t*>(base[sc.buffer] + sc_off[j]) = scales[j];
    }
    for (int64_t r = 0; r < 8; ++r) {
      rowOffsets(d, 8 * g + r, dst_off);
      for (int64_t j = 0; j < F; ++j) {
        uint8_t* out =
            reinterpret_cast<uint8_t*>(base[d.buffer] + dst_off[j] * 4);
        for (int q = 0; q < 4; ++q) {
          // The division by a power of two is exact (in double); then
          // saturation and one rounding to the element type.
          double v =
              std::ldexp(static_cast<double>(vals[r * 4 * F + 4 * j + q]),
                         127 - static_cast<int>(scales[j]));
          if (v > vmax) v = vmax;
          if (v < -vmax) v = -vmax;
          out[q] = mxEncode(t, static_cast<float>(v));
        }
      }
    }
  }
}

namespace {

// values[k][f][q] of an MX x4 matrix [K, F] times its scales.
void scaledValues(const Access& a, const Access& sc,
                  const std::vector<Buffer>& bufs, char* const* base,
                  std::vector<float>& values) {
  const DType t = bufs[a.buffer].dtype;
  const int es = elementSize(t);
  const int64_t K = a.size[0], F = freeCount(a);
  values.resize(static_cast<size_t>(K * F * 4));
  std::vector<int64_t> off, sc_off;
  for (int64_t k = 0; k < K; ++k) {
    rowOffsets(a, k, off);
    rowOffsets(sc, mxScaleRow(k), sc_off);
    for (int64_t f = 0; f < F; ++f) {
      const float scale = scaleValue(
          *reinterpret_cast<const uint8_t*>(base[sc.buffer] + sc_off[f]));
      const char* e = base[a.buffer] + off[f] * es;
      for (int q = 0; q < 4; ++q)
        values[(k * F + f) * 4 + q] = mxDecode(t, e, q) * scale;
    }
  }
}

}  // namespace

void mxLoadStationary(const Instruction& in, const std::vector<Buffer>& bufs,
                      char* const* base, MxStationary& st) {
  st.k = in.src[0].size[0];
  st.m = freeCount(in.src[0]);
  scaledValues(in.src[0], in.src[1], bufs, base, st.values);
}

void mxMatmul(const Instruction& in, const std::vector<Buffer>& bufs,
              char* const* base, const MxStationary& st) {
  const Access& d = in.dst;
  const int64_t K = st.k, M = st.m, N = freeCount(in.src[0]);
  std::vector<float> mv;
  scaledValues(in.src[0], in.src[1], bufs, base, mv);
  const DType dt = bufs[d.buffer].dtype;
  const int es = elementSize(dt);
  const bool accumulate = (in.flags & kFlagAccumulate) != 0;
  std::vector<int64_t> off;
  std::vector<float> acc(static_cast<size_t>(N));
  for (int64_t m = 0; m < M; ++m) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float* s = st.values.data() + (k * M + m) * 4;
      const float* v = mv.data() + k * N * 4;
      for (int64_t n = 0; n < N; ++n) {
        float sum = acc[n];
        for (int q = 0; q < 4; ++q) sum += s[q] * v[n * 4 + q];
        acc[n] = sum;
      }
    }
    rowOffsets(d, m, off);
    for (int64_t n = 0; n < N; ++n) {
      char* p = base[d.buffer] + off[n] * es;
      float x = acc[n];
      if (accumulate) {
        float old;
        loadRow(dt, p, 1, 1, &old);
        x += old;
      }
      storeRow(dt, p, 1, 1, &x);
    }
  }
}

}  // namespace nki
}  // namespace neuron_rt
