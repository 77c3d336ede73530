// float16 / bfloat16 <-> float32 conversions for the reduction kernels.
//
// Branch-free bit manipulation (the FP16 library's formulation, which c10
// uses too) so that the reduction loops around them auto-vectorise without
// F16C or any -march flag. Both directions round to nearest even and keep
// NaN/Inf/subnormals; no torch dependency.
#pragma once

#include <cstdint>
#include <cstring>

namespace neuron_rt {
namespace collectives {

inline float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint32_t floatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// All-ones if `c`, else zero: selects written as masks, because GCC does not
// if-convert these ternaries and then refuses to vectorise the loop.
inline uint32_t maskIf(bool c) { return 0u - static_cast<uint32_t>(c); }

inline float halfToFloat(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  // Normal numbers: shift exponent+mantissa into place, rebias by scaling.
  const uint32_t exp_offset = 0xE0u << 23;
  const float exp_scale = 0x1.0p-112f;
  const float normalized = bitsToFloat((two_w >> 4) + exp_offset) * exp_scale;
  // Subnormals: build 0.5 + m*2^-24 and subtract 0.5 (exact).
  const uint32_t magic_mask = 126u << 23;
  const float magic_bias = 0.5f;
  const float denormalized =
      bitsToFloat((two_w >> 17) | magic_mask) - magic_bias;
  // Signed comparisons on values below 2^31: SSE2 has no unsigned compare,
  // and the compiler vectorises these loops only with signed ones.
  const int32_t denormalized_cutoff = 1 << 26;
  const uint32_t sub =
      maskIf(static_cast<int32_t>(two_w >> 1) < denormalized_cutoff);
  const uint32_t result = sign | (floatToBits(denormalized) & sub) |
                          (floatToBits(normalized) & ~sub);
  return bitsToFloat(result);
}

inline uint16_t floatToHalf(float f) {
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  const uint32_t w = floatToBits(f);
  const float abs_f = bitsToFloat(w & 0x7FFFFFFFu);
  float base = (abs_f * scale_to_inf) * scale_to_zero;
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = (shl1_w >> 1) & 0x7F800000u;  // exponent bits, in place
  const uint32_t low = maskIf(static_cast<int32_t>(bias) < 0x38800000);
  bias = (bias & ~low) | (0x38800000u & low);
  // Adding 2^(e+1) lets the FPU do the round-to-nearest-even for us.
  base = bitsToFloat(bias + 0x07800000u) + base;
  const uint32_t bits = floatToBits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  // NaN: quiet, with the top payload bits (as F16C's vcvtps2ph does).
  const uint32_t nan =
      maskIf(static_cast<int32_t>(w & 0x7FFFFFFFu) > 0x7F800000);
  const uint32_t nan_bits = 0x7E00u | ((w >> 13) & 0x3FFu);
  return static_cast<uint16_t>((sign >> 16) | (nan_bits & nan) |
                               (nonsign & ~nan));
}

inline float bf16ToFloat(uint16_t b) {
  return bitsToFloat(static_cast<uint32_t>(b) << 16);
}

inline uint16_t floatToBf16(float f) {
  const uint32_t u = floatToBits(f);
  const bool nan = static_cast<int32_t>(u & 0x7FFFFFFFu) > 0x7F800000;
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const uint32_t m = maskIf(nan);
  return static_cast<uint16_t>((((u >> 16) | 0x0040u) & m) | (rounded & ~m));
}

}  // namespace collectives
}  // namespace neuron_rt
