#include "core/compute_pool.h"

#include <ATen/Parallel.h>
#include <neuron_runtime/stream.h>

#include <algorithm>

#include "core/openmp_runtime.h"

namespace torch_neuronx {
namespace {

using PauseFn = int (*)(int);
constexpr int kOmpPauseSoft = 1;  // omp_pause_soft: threads end, state kept

PauseFn findPause() {
  return reinterpret_cast<PauseFn>(openmpSymbol("omp_pause_resource_all"));
}

using OmpSetThreadsFn = void (*)(int);

// The calling worker's OpenMP threads for its next parallel region (its own
// setting: the user's threads keep theirs). Cheap when unchanged.
void setWorkerThreads(bool all) {
  static const auto omp_set =
      reinterpret_cast<OmpSetThreadsFn>(openmpSymbol("omp_set_num_threads"));
  thread_local const int every = at::get_num_threads();  // before any change
  thread_local int current = every;
  const int n = all ? every : 1;
  if (n == current || !omp_set) return;
  omp_set(n);
  current = n;
}

// Set on stream workers (the only threads the item hook runs on): a plan
// built anywhere else (never expected) must not change a host thread.
thread_local bool t_on_worker = false;

// Every item starts with every CPU torch would use.
void beginWorkerItem() {
  t_on_worker = true;
  setWorkerThreads(true);
}

// Stream workers release their pool when they go idle.
const bool kWorkerHookInstalled = [] {
  neuron_rt::setWorkerIdleHook(&releaseThreadComputePool);
  neuron_rt::setWorkerItemHook(&beginWorkerItem);
  return true;
}();

}  // namespace

void releaseThreadComputePool() {
  static const PauseFn pause = findPause();
  if (pause) pause(kOmpPauseSoft);
}

void useOneThreadIfSmall(int64_t largest_numel) {
  if (t_on_worker && largest_numel < kSmallItemElements)
    setWorkerThreads(false);
}

void useOneThread() {
  if (t_on_worker) setWorkerThreads(false);
}

}  // namespace torch_neuronx
