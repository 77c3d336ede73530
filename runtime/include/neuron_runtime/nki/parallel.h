// How the simulator spreads one instruction's work over the host's cores.
//
// The runtime has no thread pool of its own for compute: the embedder (the
// torch backend: ATen's parallel_for, on the stream worker's pool like every
// other op) installs one. Without it, work runs on the calling thread.
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
