// How the simulator spreads one instruction's work over the host's cores.
//
// The runtime has no thread pool of its own for compute: an embedder may
// install one. Without it, work runs on the calling thread — as it does
// under the torch backend, which installs none: an instruction is one tile
// (a 128 x 128 x 512 matmul, ~8 MFLOP), and forking it over a 2-core host's
// OpenMP pool measured slower (benchmarks/nki_kernels.py: tiled matmul
// 2048^3 bf16 184 ms forked vs 117 ms on one thread; flash attention
// 640-681 ms vs 476-510 ms).
#pragma once

#include <cstdint>
#include <functional>

namespace neuron_rt {
namespace nki {

using ParallelFor = void (*)(int64_t begin, int64_t end, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& body);

void setParallelFor(ParallelFor fn);

// body(b, e) over disjoint chunks covering [begin, end), each at least
// `grain` long (but the last), possibly concurrently.
void parallelFor(int64_t begin, int64_t end, int64_t grain,
                 const std::function<void(int64_t, int64_t)>& body);

}  // namespace nki
}  // namespace neuron_rt
