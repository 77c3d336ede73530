#include "core/compute_pool.h"

#include <dlfcn.h>
#include <neuron_runtime/stream.h>

namespace torch_neuronx {
namespace {

using PauseFn = int (*)(int);
constexpr int kOmpPauseSoft = 1;  // omp_pause_soft: threads end, state kept

// omp_pause_resource_all from the OpenMP runtime torch was loaded with,
// looked up rather than linked: torch builds differ in their OpenMP runtime.
PauseFn findPause() {
  for (const char* lib : {"libgomp.so.1", "libiomp5.so", "libomp.so"}) {
    if (void* h = dlopen(lib, RTLD_LAZY | RTLD_NOLOAD)) {
      if (void* f = dlsym(h, "omp_pause_resource_all"))
        return reinterpret_cast<PauseFn>(f);
    }
  }
  return nullptr;
}

// Stream workers release their pool when they go idle.
const bool kWorkerHookInstalled = [] {
  neuron_rt::setWorkerIdleHook(&releaseThreadComputePool);
  return true;
}();

}  // namespace

void releaseThreadComputePool() {
  static const PauseFn pause = findPause();
  if (pause) pause(kOmpPauseSoft);
}

}  // namespace torch_neuronx
