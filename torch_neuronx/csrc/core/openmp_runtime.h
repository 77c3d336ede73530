// The OpenMP runtime torch was loaded with, reached without linking one.
//
// This library is built without -fopenmp: torch builds differ in their
// OpenMP runtime, and a second runtime in the process would start pools of
// its own. One consequence is easy to miss: ATen's at::parallel_for is a
// header template whose parallel branch exists only where _OPENMP is
// defined, so called from this library it runs its whole range on the
// calling thread. parallelFor is that branch, reached through the runtime's
// GOMP_parallel entry point (the call `#pragma omp parallel` compiles to;
// libgomp, and the GNU-compatible entry of Intel's and LLVM's runtimes).
#pragma once

#include <cstdint>
#include <functional>

namespace torch_neuronx {

// A symbol of the OpenMP runtime (or MKL) torch was loaded with; null where
// it has none.
void* openmpSymbol(const char* name);

// at::parallel_for(begin, end, grain, body) as ATen's own kernels run it:
// on one thread below the grain, inside a parallel region or with one
// thread; otherwise over min(threads, ceil(n / grain)) chunks of
// ceil(n / chunks) on the calling thread's OpenMP pool, chunk i on the
// pool's thread i (at::get_thread_num() == i). The first exception a chunk
// throws is rethrown on the calling thread once all are done.
void parallelFor(int64_t begin, int64_t end, int64_t grain,
                 const std::function<void(int64_t, int64_t)>& body);

}  // namespace torch_neuronx
