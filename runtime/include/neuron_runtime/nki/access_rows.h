// Walking accesses of one shape row by row: the loop every pass over a tile
// program (the interpreter, the definedness check) is built on.
#pragma once

#include <cstdint>

#include "neuron_runtime/nki/program.h"

namespace neuron_rt {
namespace nki {

// Calls f(offsets, n) for each innermost row of `shape`: offsets[k] is the
// element offset where the row starts in acc[k] (every access has `shape`'s
// sizes), n the row's length. acc[k]->stride[last] steps along the row.
template <typename F>
void forEachRow(const Access& shape, const Access* const* acc, int count, F f) {
  const int nd = shape.ndim;
  for (int d = 0; d < nd; ++d)
    if (shape.size[d] <= 0) return;
  int64_t off[4];
  if (nd == 0) {
    for (int k = 0; k < count; ++k) off[k] = acc[k]->offset;
    f(off, int64_t{1});
    return;
  }
  int64_t idx[kMaxDims] = {0, 0, 0, 0, 0};
  const int last = nd - 1;
  while (true) {
    for (int k = 0; k < count; ++k) {
      int64_t o = acc[k]->offset;
      for (int d = 0; d < last; ++d) o += idx[d] * acc[k]->stride[d];
      off[k] = o;
    }
    f(off, shape.size[last]);
    int d = last - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < shape.size[d]) break;
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

inline int64_t innerStride(const Access& a) {
  return a.ndim ? a.stride[a.ndim - 1] : 1;
}

}  // namespace nki
}  // namespace neuron_rt
