// Element types of NKI tiles and their conversions to and from the engines'
// fp32 datapath. Narrowing rounds to nearest even, as the engines' output
// converters do; fp8 saturates to the format's largest finite value (every
// fp8 type, ±inf inputs included; NaN stays NaN).
#pragma once

#include <cstdint>

namespace neuron_rt {
namespace nki {

enum class DType : uint8_t {
  kF32 = 0,
  kBF16 = 1,
  kF16 = 2,
  kF8E4M3FN = 3,  // NKI float8_e4m3fn: max 448, no infinities, NaN S.1111.111
  kF8E5M2 = 4,
  kI32 = 5,
  kU32 = 6,
  kI16 = 7,
  kU16 = 8,
  kI8 = 9,
  kU8 = 10,
  kBool = 11,  // one byte, 0 or 1
  // NKI float8_e4m3, IEEE-style: bias 7, exponent 1111 holds ±inf (S.1111.000)
  // and NaNs, max 240. Added after the others: earlier codes keep their
  // meaning in records.
  kF8E4M3 = 12,
  // NKI's MX packed types (NeuronCore-v4 nc_matmul_mx / quantize_mx): one
  // element is four values, element q of a container in byte q (fp8, a
  // 32-bit container) or in bits 4q..4q+3 (fp4 E2M1, a 16-bit container),
  // as NKI's MX guide packs them. No arithmetic reads them: DMAs and copies
  // move their bits (mx.h decodes them).
  kF8E4M3FNx4 = 13,
  kF8E5M2x4 = 14,
  kF4E2M1FNx4 = 15,
  kCount = 16,
};

int elementSize(DType t);
const char* dtypeName(DType t);
bool isFloat(DType t);
bool isSigned(DType t);  // floats and the intN types

float bf16ToFloat(uint16_t v);
uint16_t floatToBf16(float f);
float f16ToFloat(uint16_t v);
uint16_t floatToF16(float f);
float f8e4m3fnToFloat(uint8_t v);  // kF8E4M3FN
uint8_t floatToF8e4m3fn(float f);
float f8e4m3ToFloat(uint8_t v);  // kF8E4M3 (IEEE-style)
uint8_t floatToF8e4m3(float f);
float f8e5m2ToFloat(uint8_t v);
uint8_t floatToF8e5m2(float f);

// Reads n elements at base + k * stride (elements of t) into out as fp32.
void loadRow(DType t, const void* base, int64_t stride, int64_t n, float* out);
// Writes n fp32 values, converted to t, to base + k * stride.
void storeRow(DType t, void* base, int64_t stride, int64_t n, const float* in);

}  // namespace nki
}  // namespace neuron_rt
