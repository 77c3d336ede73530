#include "core/openmp_runtime.h"

#include <ATen/Parallel.h>
#include <c10/util/ParallelGuard.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <exception>

namespace torch_neuronx {
namespace {

using GompParallelFn = void (*)(void (*)(void*), void*, unsigned, unsigned);
using IntFn = int (*)();

struct Runtime {
  GompParallelFn parallel = nullptr;
  IntFn team_size = nullptr;     // omp_get_num_threads
  IntFn thread_index = nullptr;  // omp_get_thread_num
  bool usable() const { return parallel && team_size && thread_index; }
};

const Runtime& runtime() {
  static const Runtime r{
      reinterpret_cast<GompParallelFn>(openmpSymbol("GOMP_parallel")),
      reinterpret_cast<IntFn>(openmpSymbol("omp_get_num_threads")),
      reinterpret_cast<IntFn>(openmpSymbol("omp_get_thread_num"))};
  return r;
}

// What every thread of the region shares.
struct Region {
  int64_t begin, end, grain;
  const std::function<void(int64_t, int64_t)>* body;
  std::atomic_flag failed = ATOMIC_FLAG_INIT;
  std::exception_ptr error;
};

// ATen's invoke_parallel, per thread of the team.
void runChunk(void* data) {
  auto& region = *static_cast<Region*>(data);
  const Runtime& rt = runtime();
  int64_t chunks = rt.team_size();
  const int64_t n = region.end - region.begin;
  if (region.grain > 0)
    chunks = std::min(chunks, (n + region.grain - 1) / region.grain);
  const int64_t tid = rt.thread_index();
  const int64_t size = (n + chunks - 1) / chunks;
  const int64_t first = region.begin + tid * size;
  if (first >= region.end) return;
  try {
    at::internal::ThreadIdGuard tid_guard(static_cast<int>(tid));
    c10::ParallelGuard guard(true);
    (*region.body)(first, std::min(region.end, first + size));
  } catch (...) {
    if (!region.failed.test_and_set()) region.error = std::current_exception();
  }
}

}  // namespace

void* openmpSymbol(const char* name) {
  for (const char* lib : {"libgomp.so.1", "libiomp5.so", "libomp.so"}) {
    if (void* h = dlopen(lib, RTLD_LAZY | RTLD_NOLOAD)) {
      if (void* f = dlsym(h, name)) return f;
    }
  }
  return dlsym(RTLD_DEFAULT, name);
}

void parallelFor(int64_t begin, int64_t end, int64_t grain,
                 const std::function<void(int64_t, int64_t)>& body) {
  if (begin >= end) return;
  at::internal::lazy_init_num_threads();
  const Runtime& rt = runtime();
  const int64_t n = end - begin;
  if (!rt.usable() || n <= grain || n <= 1 || at::in_parallel_region() ||
      at::get_num_threads() <= 1) {
    // at::parallel_for's own serial branch (and its whole behaviour where
    // torch has no OpenMP runtime).
    at::parallel_for(begin, end, grain, body);
    return;
  }
  Region region{begin, end, grain, &body};
  rt.parallel(&runChunk, &region, 0, 0);
  if (region.error) std::rethrow_exception(region.error);
}

}  // namespace torch_neuronx
