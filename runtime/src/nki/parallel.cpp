#include "neuron_runtime/nki/parallel.h"

#include <atomic>

namespace neuron_rt {
namespace nki {
namespace {
std::atomic<ParallelFor> g_parallel_for{nullptr};
}  // namespace

void setParallelFor(ParallelFor fn) { g_parallel_for.store(fn); }

void parallelFor(int64_t begin, int64_t end, int64_t grain,
                 const std::function<void(int64_t, int64_t)>& body) {
  if (begin >= end) return;
  ParallelFor fn = g_parallel_for.load(std::memory_order_relaxed);
  if (fn && end - begin > grain) {
    fn(begin, end, grain, body);
  } else {
    body(begin, end);
  }
}

}  // namespace nki
}  // namespace neuron_rt
