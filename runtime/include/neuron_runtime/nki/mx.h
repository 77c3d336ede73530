// MX (microscaling) numbers of NKI's NeuronCore-v4 instructions
// (program.h: Op::kQuantizeMx, kMxLoadStationary, kMatmulMx): the packed
// x4 element types, E8M0 block scales and the instructions' checks and
// execution. Semantics from NKI's pages (nki.isa.quantize_mx,
// nki.isa.nc_matmul_mx) and its MX matmul guide (deep-dives/mxfp-matmul):
// a scale covers 8 partitions x 4 values (one packed element per
// partition); its exponent is the largest fp32 exponent of the 32 values
// less the element type's largest (8 for e4m3fn, 15 for e5m2: the OCP MX
// v1.0 rule, as the guide's and NKI-lib's golden references compute it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "neuron_runtime/nki/dtype.h"
#include "neuron_runtime/nki/program.h"

namespace neuron_rt {
namespace nki {

bool isMxPacked(DType t);
// Value q (0..3) of the packed element at `element`.
float mxDecode(DType t, const void* element, int q);
// The code of one value of t's element type (fp8 byte or fp4 nibble) for
// fp32 x: rounded to nearest even, saturating at the type's largest finite
// value (NaN stays NaN for fp8; fp4 has none and saturates it to 0).
uint8_t mxEncode(DType t, float x);
// The E8M0 scale of a group whose largest biased fp32 exponent field is e.
uint8_t mxScale(DType t, int e);
// The partition of a scale tile that holds the scale of partition p's
// group: (p / 32) * 32 + (p % 32) / 8.
inline int64_t mxScaleRow(int64_t p) { return (p / 32) * 32 + (p % 32) / 8; }

// Structural checks of the three records (empty when fine); `at` is the
// instruction's index (kMatmulMx needs a kMxLoadStationary before it).
std::string mxCheck(const std::vector<Instruction>& ins, size_t at,
                    const std::vector<Buffer>& bufs);

// The Tensor engine's loaded MX stationary matrix (one per core).
struct MxStationary {
  int64_t k = 0, m = 0;
  std::vector<float> values;  // [k][m][4], scaled
};

// Execution over the tiles' memory (base[b]: buffer b's first byte).
void mxQuantize(const Instruction& in, const std::vector<Buffer>& bufs,
                char* const* base);
void mxLoadStationary(const Instruction& in, const std::vector<Buffer>& bufs,
                      char* const* base, MxStationary& st);
void mxMatmul(const Instruction& in, const std::vector<Buffer>& bufs,
              char* const* base, const MxStationary& st);

}  // namespace nki
}  // namespace neuron_rt
