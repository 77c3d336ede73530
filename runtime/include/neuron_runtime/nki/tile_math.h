// The engines' arithmetic on fp32 rows: the ALU operations of the Vector and
// GpSimd engines, their search instructions (top 8, matching, nonzero
// positions), the Scalar engine's activation functions, and the Tensor
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

// The Vector engine's search instructions on one partition's n fp32
// elements (program.h, Op::kMax8 .. kMatchReplace8).
// out[0..8) = the 8 largest of x, descending (NaN above every number).
void top8Descending(const float* x, int64_t n, float* out);
// pos[i] = the position of vals[i] in x: values are matched in the order
// i = 0..7 (descending: 7..0), each taking the first equal position no
// earlier one took; kSearchNotFound when none is left.
void matchPositions(const float* x, int64_t n, const float* vals,
                    bool descending, int64_t* pos);
// out[0..n] = the positions k + offset of x[k] != 0, then padding, then
// their count (nonzero_with_count's layout).
void nonzeroPositions(const float* x, int64_t n, int64_t offset,
                      int64_t padding, int64_t* out);

// The random stream of a run (program.h, Op::kRandomSeed .. kDropout): a
// counter-based generator, value `position` of the stream of `key` being
// SplitMix64's output function of key + (position + 1) * golden ratio (the
// position-th output of SplitMix64 started at key), so any value is computed
// on its own, whatever thread or order.
uint64_t randomBits(uint64_t key, uint64_t position);
// The key of a 32-bit seed (hashed: nearby seeds give unrelated streams).
uint64_t randomKeyOfSeed(uint32_t seed);
// A key no earlier call in the process returned: a process-wide atomic
// counter mixed with a per-process random value (two runs differ, two
// processes too).
uint64_t freshRandomKey();
// out[k] = uniform value in [0, 1) of position + k: the top `bits` bits of
// randomBits as j / 2^bits (exact in a float type of that many significant
// bits; bits <= 24).
void uniformRow(uint64_t key, uint64_t position, int64_t n, int bits,
                float* out);
// Significant bits (with the implicit one) of a float type: 24 for fp32, 8
// for bf16, 11 for fp16, 4 for fp8 e4m3(fn), 3 for e5m2; 24 for other types.
int significantBits(DType t);

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
