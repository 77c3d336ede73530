// The engines' arithmetic on fp32 rows: the ALU operations of the Vector and
// GpSimd engines, the Scalar engine's activation functions, and the Tensor
// engine's matrix multiply.
#pragma once

#include <cstdint>

#include "neuron_runtime/nki/program.h"

namespace neuron_rt {
namespace nki {

// out[k] = op(a[k], b[k]).
void applyAlu(Alu op, const float* a, const float* b, float* out, int64_t n);
// out[k] = f(in[k]).
void applyActivation(Act f, const float* in, float* out, int64_t n);
// Scalar reduction of a and b (the identity is reductionIdentity(op)).
float reduceAlu(Alu op, float acc, const float* x, int64_t n);
float reductionIdentity(Alu op);
float aluScalar(Alu op, float a, float b);

// c[M][N] = sum_k s[k][M] * v[k][N] (row-major, fp32): the Tensor engine's
// stationary^T x moving.
void matmulKernel(const float* s, const float* v, float* c, int64_t K,
                  int64_t M, int64_t N);

// The same for bf16 operands (rows at s + k * s_row, elements s_col apart),
// products summed in fp32 as the Tensor engine does. Uses the CPU's bf16
// dot-product instructions; returns false (nothing done) where it has none.
bool matmulBf16Kernel(const uint16_t* s, int64_t s_row, int64_t s_col,
                      const uint16_t* v, int64_t v_row, int64_t v_col, float* c,
                      int64_t K, int64_t M, int64_t N);

}  // namespace nki
}  // namespace neuron_rt
