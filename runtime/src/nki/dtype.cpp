#include "neuron_runtime/nki/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "neuron_runtime/nki/mx.h"

namespace neuron_rt {
namespace nki {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float fromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// fp32 -> bf16, round to nearest even; NaN stays a (quiet) NaN. Local to
// this file so that storeRow's loop inlines it: floatToBf16 is an exported
// function of a -fPIC library, which GCC does not inline (it could be
// interposed), and a call per element made bf16 stores 2-2.5x slower.
inline uint16_t roundToBf16(float f) {
  uint32_t u = bits(f);
  if ((u & 0x7fffffff) > 0x7f800000)
    return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

// Rounds |f| (finite, >= 0) to a float format with `mant` mantissa bits and
// minimum normal exponent `emin`, nearest even; returns the value as fp32.
float roundToFormat(float a, int mant, int emin) {
  if (a == 0.0f) return a;
  int e;
  std::frexp(a, &e);           // a = m * 2^e, m in [0.5, 1)
  int exp = e - 1;             // a = 1.x * 2^exp
  if (exp < emin) exp = emin;  // subnormal: fixed quantum
  const float quantum = std::ldexp(1.0f, exp - mant);
  return std::nearbyint(a / quantum) * quantum;  // default mode: to even
}

uint8_t encodeF8(float f, int mant, int bias, float max_finite, bool has_inf) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  if (std::isnan(f)) return 0x7f;  // a NaN in e4m3fn, e4m3 and e5m2 alike
  float a = std::fabs(f);
  const int emin = 1 - bias;
  a = roundToFormat(a, mant, emin);
  if (a > max_finite || std::isinf(a)) a = max_finite;  // saturate, ±inf too
  if (a == 0.0f) return sign;
  int e;
  const float m = std::frexp(a, &e);  // a = m * 2^e
  int exp = e - 1;
  if (exp < emin) {  // subnormal
    const int q = static_cast<int>(std::ldexp(a, mant - emin));
    return sign | static_cast<uint8_t>(q);
  }
  const int frac = static_cast<int>(std::ldexp(m * 2.0f - 1.0f, mant) + 0.5f);
  return sign | static_cast<uint8_t>(((exp + bias) << mant) | frac);
}

float decodeF8(uint8_t v, int mant, int bias, bool has_inf) {
  const bool neg = v & 0x80;
  const int e = (v >> mant) & ((1 << (7 - mant)) - 1);
  const int m = v & ((1 << mant) - 1);
  const int emax_field = (1 << (7 - mant)) - 1;
  float r;
  if (has_inf && e == emax_field) {
    r = m == 0 ? std::numeric_limits<float>::infinity()
               : std::numeric_limits<float>::quiet_NaN();
  } else if (!has_inf && e == emax_field && m == (1 << mant) - 1) {
    r = std::numeric_limits<float>::quiet_NaN();  // e4m3fn: S.1111.111
  } else if (e == 0) {
    r = std::ldexp(static_cast<float>(m), 1 - bias - mant);
  } else {
    r = std::ldexp(1.0f + std::ldexp(static_cast<float>(m), -mant), e - bias);
  }
  return neg ? -r : r;
}

template <typename T>
T saturate(float f) {
  if (std::isnan(f)) return 0;
  const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
  const double hi = static_cast<double>(std::numeric_limits<T>::max());
  double d = std::trunc(static_cast<double>(f));
  if (d < lo) d = lo;
  if (d > hi) d = hi;
  return static_cast<T>(d);
}

template <typename T>
void loadInt(const void* base, int64_t stride, int64_t n, float* out) {
  const T* p = static_cast<const T*>(base);
  for (int64_t k = 0; k < n; ++k) out[k] = static_cast<float>(p[k * stride]);
}
template <typename T>
void storeInt(void* base, int64_t stride, int64_t n, const float* in) {
  T* p = static_cast<T*>(base);
  for (int64_t k = 0; k < n; ++k) p[k * stride] = saturate<T>(in[k]);
}

}  // namespace

int elementSize(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kI32:
    case DType::kU32:
    case DType::kF8E4M3FNx4:
    case DType::kF8E5M2x4:
      return 4;
    case DType::kBF16:
    case DType::kF16:
    case DType::kI16:
    case DType::kU16:
    case DType::kF4E2M1FNx4:
      return 2;
    default:
      return 1;
  }
}

const char* dtypeName(DType t) {
  static const char* names[] = {"float32",        "bfloat16",
                                "float16",        "float8_e4m3fn",
                                "float8_e5m2",    "int32",
                                "uint32",         "int16",
                                "uint16",         "int8",
                                "uint8",          "bool",
                                "float8_e4m3",    "float8_e4m3fn_x4",
                                "float8_e5m2_x4", "float4_e2m1fn_x4"};
  const int k = static_cast<int>(t);
  return k < static_cast<int>(DType::kCount) ? names[k] : "?";
}

bool isFloat(DType t) {
  return static_cast<int>(t) <= 4 || t == DType::kF8E4M3 ||
         t == DType::kF8E4M3FNx4 || t == DType::kF8E5M2x4 ||
         t == DType::kF4E2M1FNx4;
}

bool isSigned(DType t) {
  return isFloat(t) || t == DType::kI32 || t == DType::kI16 || t == DType::kI8;
}

float bf16ToFloat(uint16_t v) {
  return fromBits(static_cast<uint32_t>(v) << 16);
}

uint16_t floatToBf16(float f) { return roundToBf16(f); }

float f16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const int e = (h >> 10) & 0x1f;
  const uint32_t m = h & 0x3ff;
  if (e == 0) {
    const float r = std::ldexp(static_cast<float>(m), -24);
    return sign ? -r : r;
  }
  if (e == 31) return fromBits(sign | 0x7f800000 | (m << 13));
  return fromBits(sign | (static_cast<uint32_t>(e + 112) << 23) | (m << 13));
}

uint16_t floatToF16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return 0x7e00;
  float a = std::fabs(f);
  a = roundToFormat(a, 10, -14);
  if (a >= 65520.0f || std::isinf(a)) return sign | 0x7c00;  // overflow: inf
  if (a == 0.0f) return sign;
  int e;
  const float m = std::frexp(a, &e);
  const int exp = e - 1;
  if (exp < -14)
    return sign | static_cast<uint16_t>(std::ldexp(a, 24));  // subnormal
  const int frac = static_cast<int>(std::ldexp(m * 2.0f - 1.0f, 10) + 0.5f);
  return sign | static_cast<uint16_t>(((exp + 15) << 10) | frac);
}

float f8e4m3fnToFloat(uint8_t v) { return decodeF8(v, 3, 7, false); }
uint8_t floatToF8e4m3fn(float f) { return encodeF8(f, 3, 7, 448.0f, false); }
float f8e4m3ToFloat(uint8_t v) { return decodeF8(v, 3, 7, true); }
uint8_t floatToF8e4m3(float f) { return encodeF8(f, 3, 7, 240.0f, true); }
float f8e5m2ToFloat(uint8_t v) { return decodeF8(v, 2, 15, true); }
uint8_t floatToF8e5m2(float f) { return encodeF8(f, 2, 15, 57344.0f, true); }

void loadRow(DType t, const void* base, int64_t stride, int64_t n, float* out) {
  switch (t) {
    case DType::kF32: {
      const float* p = static_cast<const float*>(base);
      if (stride == 1) {
        std::memcpy(out, p, n * sizeof(float));
      } else {
        for (int64_t k = 0; k < n; ++k) out[k] = p[k * stride];
      }
      return;
    }
    case DType::kBF16: {
      const uint16_t* p = static_cast<const uint16_t*>(base);
      for (int64_t k = 0; k < n; ++k)
        out[k] = fromBits(static_cast<uint32_t>(p[k * stride]) << 16);
      return;
    }
    case DType::kF16: {
      const uint16_t* p = static_cast<const uint16_t*>(base);
      for (int64_t k = 0; k < n; ++k) out[k] = f16ToFloat(p[k * stride]);
      return;
    }
    case DType::kF8E4M3FN: {
      const uint8_t* p = static_cast<const uint8_t*>(base);
      for (int64_t k = 0; k < n; ++k) out[k] = f8e4m3fnToFloat(p[k * stride]);
      return;
    }
    case DType::kF8E4M3: {
      const uint8_t* p = static_cast<const uint8_t*>(base);
      for (int64_t k = 0; k < n; ++k) out[k] = f8e4m3ToFloat(p[k * stride]);
      return;
    }
    case DType::kF8E5M2: {
      const uint8_t* p = static_cast<const uint8_t*>(base);
      for (int64_t k = 0; k < n; ++k) out[k] = f8e5m2ToFloat(p[k * stride]);
      return;
    }
    case DType::kI32:
      return loadInt<int32_t>(base, stride, n, out);
    case DType::kU32:
      return loadInt<uint32_t>(base, stride, n, out);
    case DType::kI16:
      return loadInt<int16_t>(base, stride, n, out);
    case DType::kU16:
      return loadInt<uint16_t>(base, stride, n, out);
    case DType::kI8:
      return loadInt<int8_t>(base, stride, n, out);
    case DType::kU8:
    case DType::kBool:
      return loadInt<uint8_t>(base, stride, n, out);
    default:
      return;
  }
}

void storeRow(DType t, void* base, int64_t stride, int64_t n, const float* in) {
  switch (t) {
    case DType::kF32: {
      float* p = static_cast<float*>(base);
      if (stride == 1) {
        std::memcpy(p, in, n * sizeof(float));
      } else {
        for (int64_t k = 0; k < n; ++k) p[k * stride] = in[k];
      }
      return;
    }
    case DType::kBF16: {
      uint16_t* p = static_cast<uint16_t*>(base);
      for (int64_t k = 0; k < n; ++k) p[k * stride] = roundToBf16(in[k]);
      return;
    }
    case DType::kF16: {
      uint16_t* p = static_cast<uint16_t*>(base);
      for (int64_t k = 0; k < n; ++k) p[k * stride] = floatToF16(in[k]);
      return;
    }
    case DType::kF8E4M3FN: {
      uint8_t* p = static_cast<uint8_t*>(base);
      for (int64_t k = 0; k < n; ++k) p[k * stride] = floatToF8e4m3fn(in[k]);
      return;
    }
    case DType::kF8E4M3: {
      uint8_t* p = static_cast<uint8_t*>(base);
      for (int64_t k = 0; k < n; ++k) p[k * stride] = floatToF8e4m3(in[k]);
      return;
    }
    case DType::kF8E5M2: {
      uint8_t* p = static_cast<uint8_t*>(base);
      for (int64_t k = 0; k < n; ++k) p[k * stride] = floatToF8e5m2(in[k]);
      return;
    }
    case DType::kI32:
      return storeInt<int32_t>(base, stride, n, in);
    case DType::kU32:
      return storeInt<uint32_t>(base, stride, n, in);
    case DType::kI16:
      return storeInt<int16_t>(base, stride, n, in);
    case DType::kU16:
      return storeInt<uint16_t>(base, stride, n, in);
    case DType::kI8:
      return storeInt<int8_t>(base, stride, n, in);
    case DType::kU8:
      return storeInt<uint8_t>(base, stride, n, in);
    case DType::kBool: {
      uint8_t* p = static_cast<uint8_t*>(base);
      for (int64_t k = 0; k < n; ++k) p[k * stride] = in[k] != 0.0f;
      return;
    }
    case DType::kF8E4M3FNx4:
    case DType::kF8E5M2x4:
    case DType::kF4E2M1FNx4: {
      // A fill (memset): all four values of each element.
      const int es = elementSize(t);
      uint8_t* p = static_cast<uint8_t*>(base);
      for (int64_t k = 0; k < n; ++k) {
        const uint8_t c = mxEncode(t, in[k]);
        const uint8_t b = es == 2 ? static_cast<uint8_t>(c | (c << 4)) : c;
        std::memset(p + k * stride * es, b, es);
      }
      return;
    }
    default:
      return;
  }
}

}  // namespace nki
}  // namespace neuron_rt
