#include "core/compute_pool.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <neuron_runtime/stream.h>

#include <algorithm>

namespace torch_neuronx {
namespace {

using PauseFn = int (*)(int);
constexpr int kOmpPauseSoft = 1;  // omp_pause_soft: threads end, state kept

// A symbol of the OpenMP runtime (or MKL) torch was loaded with, looked up
// rather than linked: torch builds differ in their OpenMP runtime.
void* findSymbol(const char* name) {
  for (const char* lib : {"libgomp.so.1", "libiomp5.so", "libomp.so"}) {
    if (void* h = dlopen(lib, RTLD_LAZY | RTLD_NOLOAD)) {
      if (void* f = dlsym(h, name)) return f;
    }
  }
  return dlsym(RTLD_DEFAULT, name);
}

PauseFn findPause() {
  return reinterpret_cast<PauseFn>(findSymbol("omp_pause_resource_all"));
}

using OmpSetThreadsFn = void (*)(int);

// Before an item: every CPU torch would use for it while a host thread waits
// for the device; one fewer while the host is busy issuing work, so that the
// host's thread has a CPU of its own (small GPT on 2 CPUs: 8-11 ms per
// training step with both to the worker, 4.8 with one). Thread-local
// settings of the worker only: the user's CPU kernels keep theirs.
void sizeWorkerThreads(bool host_waiting) {
  static const auto omp_set =
      reinterpret_cast<OmpSetThreadsFn>(findSymbol("omp_set_num_threads"));
  thread_local const int all = at::get_num_threads();  // before any change
  if (all <= 1 || !omp_set) return;
  const int n = host_waiting ? all : std::max(1, all - 1);
  omp_set(n);
}

// Stream workers release their pool when they go idle, and size it by what
// the host does.
const bool kWorkerHookInstalled = [] {
  neuron_rt::setWorkerIdleHook(&releaseThreadComputePool);
  neuron_rt::setWorkerParallelismHook(&sizeWorkerThreads);
  return true;
}();

}  // namespace

void releaseThreadComputePool() {
  static const PauseFn pause = findPause();
  if (pause) pause(kOmpPauseSoft);
}

}  // namespace torch_neuronx
