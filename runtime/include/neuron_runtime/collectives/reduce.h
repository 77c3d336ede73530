// Element-wise reduction kernels over several source buffers.
//
// Every rank of a collective runs these same kernels over sources in rank
// order, element by element, so a given element is computed by the same
// sequence of floating-point operations wherever it is computed: results are
// bit-identical on all ranks (the target is built with -ffp-contract=off so
// that no FMA contraction can differ between a vector body and its tail).
// float16/bfloat16 accumulate in float32 over all sources of one call and
// round once at the end.
#pragma once

#include <cstddef>
#include <string>

#include "neuron_runtime/collectives/types.h"

namespace neuron_rt {
namespace collectives {

// Empty if `op` is defined for `dtype`, else a message saying why not
// (bitwise ops on floats, PREMUL_SUM on integers, AVG on bool).
std::string checkReduce(DataType dtype, ReduceOp op);

// out[i] = srcs[0][i] (op) srcs[1][i] (op) ... (op) srcs[n-1][i] for i in
// [0, count). `out` may alias srcs[k] exactly (same pointer), not partially.
// `out2`, if not null, receives a copy of `out`, written in the same pass
// (the all-reduce's own output and the slice its peers gather). `factor` is
// PREMUL_SUM's scalar; `avg_divisor` is AVG's divisor (the world size). The
// caller has checked checkReduce().
void reduceInto(DataType dtype, ReduceOp op, void* out, void* out2,
                const void* const* srcs, int n, size_t count, double factor,
                int avg_divisor);

}  // namespace collectives
}  // namespace neuron_rt
