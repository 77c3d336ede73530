#include "core/memory_history.h"

#include <torch/csrc/profiler/combined_traceback.h>

#include "core/python_stacks.h"

namespace torch_neuronx {
namespace detail {
thread_local const char* tls_alloc_label = nullptr;
std::atomic<bool> g_record_history{false};
}  // namespace detail

namespace {
std::atomic<bool> g_python_stacks{false};
std::atomic<size_t> g_max_entries{0};
std::atomic<PythonThreadProbe> g_python_thread{nullptr};
}  // namespace

void setPythonThreadProbe(PythonThreadProbe probe) {
  g_python_thread.store(probe);
}

void setRecordHistory(bool enabled, bool python_stacks, size_t max_entries) {
  g_python_stacks.store(enabled && python_stacks);
  g_max_entries.store(enabled ? max_entries : 0);
  detail::g_record_history.store(enabled);
}

size_t historyMaxEntries() { return g_max_entries.load(); }

std::shared_ptr<c10::GatheredContext> gatherAllocContext() {
  if (!g_python_stacks.load(std::memory_order_relaxed)) return nullptr;
  // Only threads that Python knows (the user's): torch releases the GIL
  // around ops, so gathering takes it again, which is safe there because the
  // allocator calls this before taking its own lock. Device workers, which
  // free blocks while a Python thread may wait for them, never touch it.
  const PythonThreadProbe python_thread = g_python_thread.load();
  if (!python_thread || !python_thread()) return nullptr;
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/false,
                                          /*cpp=*/false);
}

}  // namespace torch_neuronx
