#include "ops/scaled_mm.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cmath>

#include "eager/device_op.h"
#include "eager/op_stats.h"

namespace torch_neuronx {
namespace {

// OCP MX: 32 consecutive elements along K share one E8M0 scale.
constexpr int64_t kMxBlock = 32;

int64_t roundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// A [rows, K/32] grid of block scales from cuBLAS's swizzled layout (the one
// CUDA's MX _scaled_mm takes and torchao's to_blocked writes): the grid padded
// to 128-row x 4-column tiles, each tile stored as [32][4 row groups][4 cols]
// (row r of the tile at group r / 32, position r % 32), tiles row-major.
at::Tensor unswizzle(const at::Tensor& flat, int64_t rows, int64_t cols) {
  const int64_t rb = roundUp(rows, 128) / 128, cb = roundUp(cols, 4) / 4;
  return flat.reshape({rb, cb, 32, 4, 4})
      .permute({0, 3, 2, 1, 4})
      .reshape({rb * 128, cb * 4})
      .narrow(0, 0, rows)
      .narrow(1, 0, cols);
}

// E8M0 bits b -> 2^(b - 127); 0xFF is NaN (no infinities, no zero).
at::Tensor e8m0ToFloat(const at::Tensor& bits) {
  const at::Tensor b = bits.view(at::kByte).to(at::kFloat);
  const at::Tensor v = at::exp2(b - 127.0);
  return at::where(b == 255.0, at::full({}, NAN, v.options()), v);
}

// FP4 E2M1 codes (a nibble each) -> their values.
at::Tensor fp4Values(const at::Tensor& packed) {
  static const float kLut[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,
                                 4.0f,  6.0f,  -0.0f, -0.5f, -1.0f, -1.5f,
                                 -2.0f, -3.0f, -4.0f, -6.0f};
  const at::Tensor b = packed.view(at::kByte).to(at::kLong);
  // The low nibble is the first element (float4_e2m1fn_x2).
  const at::Tensor codes =
      at::stack({at::bitwise_and(b, 15), at::bitwise_right_shift(b, 4)}, -1)
          .flatten(-2);
  const at::Tensor lut =
      at::from_blob(const_cast<float*>(kLut), {16}, at::kFloat)
          .to(packed.device());
  return lut.index_select(0, codes.flatten()).view(codes.sizes());
}

// An operand's values as fp32, [rows, K] with K along the last dim (mat2 is
// given [K, N]; the caller passes its transpose).
at::Tensor elementValues(const at::Tensor& t) {
  if (t.scalar_type() == at::kFloat4_e2m1fn_x2) return fp4Values(t);
  return t.to(at::kFloat);
}

bool isMxOperand(at::ScalarType s) {
  return s == at::kFloat8_e4m3fn || s == at::kFloat8_e5m2 ||
         s == at::kFloat4_e2m1fn_x2;
}

at::Tensor mxScaledMm(const at::Tensor& a, const at::Tensor& b,
                      const at::Tensor& scale_a, const at::Tensor& scale_b,
                      const std::optional<at::Tensor>& bias,
                      std::optional<at::ScalarType> out_dtype) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2,
              "_scaled_mm: expected 2-D operands, got ", a.sizes(), " and ",
              b.sizes());
  TORCH_CHECK(isMxOperand(a.scalar_type()) && isMxOperand(b.scalar_type()),
              "_scaled_mm with MX (float8_e8m0fnu) block scales takes "
              "float8_e4m3fn, float8_e5m2 or float4_e2m1fn_x2 operands, got ",
              a.scalar_type(), " and ", b.scalar_type());
  TORCH_CHECK(scale_b.scalar_type() == at::kFloat8_e8m0fnu,
              "_scaled_mm: scale_a is float8_e8m0fnu (MX block scales), so "
              "scale_b must be too, got ",
              scale_b.scalar_type());
  const bool fp4_a = a.scalar_type() == at::kFloat4_e2m1fn_x2;
  const bool fp4_b = b.scalar_type() == at::kFloat4_e2m1fn_x2;
  TORCH_CHECK(fp4_a == fp4_b,
              "_scaled_mm: MX operands must both be fp8 or both fp4, got ",
              a.scalar_type(), " and ", b.scalar_type());
  const int64_t m = a.size(0), n = b.size(1);
  const int64_t k = fp4_a ? a.size(1) * 2 : a.size(1);
  TORCH_CHECK((fp4_b ? b.size(0) * 2 : b.size(0)) == k,
              "_scaled_mm: mat1 and mat2 shapes cannot be multiplied (", m, "x",
              k, " and ", (fp4_b ? b.size(0) * 2 : b.size(0)), "x", n, ")");
  TORCH_CHECK(k % kMxBlock == 0,
              "_scaled_mm: MX block scaling needs K divisible by ", kMxBlock,
              ", got K=", k);
  const int64_t kb = k / kMxBlock;
  const auto expect = [&](const at::Tensor& s, int64_t rows, const char* nm) {
    const int64_t want = roundUp(rows, 128) * roundUp(kb, 4);
    TORCH_CHECK(s.numel() == want, "_scaled_mm: ", nm,
                " holds MX block scales in the swizzled (128 x 4 tile) "
                "layout: expected ",
                want, " elements for ", rows, " rows and ", kb,
                " blocks of 32 along K, got ", s.numel());
  };
  expect(scale_a, m, "scale_a");
  expect(scale_b, n, "scale_b");
  const at::ScalarType out = out_dtype.value_or(at::kBFloat16);
  TORCH_CHECK(out == at::kBFloat16 || out == at::kHalf || out == at::kFloat,
              "_scaled_mm: MX block scaling produces bfloat16, float16 or "
              "float32, not ",
              out);

  const at::Tensor sa = e8m0ToFloat(unswizzle(scale_a.contiguous(), m, kb))
                            .repeat_interleave(kMxBlock, 1);
  const at::Tensor sb = e8m0ToFloat(unswizzle(scale_b.contiguous(), n, kb))
                            .repeat_interleave(kMxBlock, 1);
  // mat2 is [K, N] (fp4: [K/2, N], packed along K): decode it as [N, K].
  const at::Tensor av = elementValues(a) * sa;
  const at::Tensor bv = elementValues(b.t()) * sb;  // [N, K]
  at::Tensor result = at::mm(av, bv.t());
  if (bias.has_value() && bias->defined())
    result = result + bias->to(at::kFloat);
  return result.to(out);
}

}  // namespace

void scaledMm(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
              torch::jit::Stack* stack) {
  // _scaled_mm(self, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
  //            use_fast_accum)
  constexpr size_t kArgs = 8;
  const auto arg = [&](size_t i) -> const c10::IValue& {
    return (*stack)[stack->size() - kArgs + i];
  };
  if (stack->size() < kArgs || !arg(2).isTensor() ||
      arg(2).toTensor().scalar_type() != at::kFloat8_e8m0fnu) {
    deviceOpFallback(op, ks, stack);
    return;
  }
  static std::atomic<uint32_t> seen{0};
  noteExecutedOnce("aten::_scaled_mm", seen);
  const at::Tensor a = arg(0).toTensor(), b = arg(1).toTensor();
  const at::Tensor scale_a = arg(2).toTensor(), scale_b = arg(3).toTensor();
  const std::optional<at::Tensor> bias = arg(4).toOptional<at::Tensor>();
  TORCH_CHECK(arg(5).isNone(),
              "_scaled_mm: scale_result is not supported with MX block "
              "scales");
  const std::optional<at::ScalarType> out_dtype =
      arg(6).toOptional<at::ScalarType>();
  at::Tensor out = mxScaledMm(a, b, scale_a, scale_b, bias, out_dtype);
  torch::jit::drop(*stack, kArgs);
  torch::jit::push(*stack, std::move(out));
}

}  // namespace torch_neuronx
