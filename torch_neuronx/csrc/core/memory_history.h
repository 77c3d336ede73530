// What the caching allocator records about each allocation, for memory
// snapshots (torch.neuron.memory._snapshot) and leak hunting, while history
// recording is on (torch.neuron.memory._record_memory_history):
// - the label of the work being launched (the op), which the op paths set in
//   a thread-local;
// - the Python stack, and a trace of alloc/free events.
// Off, it costs one relaxed atomic load per op and per allocation: the
// thread-local is not touched (in a shared library each access is a call).
#pragma once

#include <c10/core/Allocator.h>

#include <atomic>
#include <cstddef>
#include <memory>

namespace torch_neuronx {

namespace detail {
extern thread_local const char* tls_alloc_label;
extern std::atomic<bool> g_record_history;
}  // namespace detail

inline bool recordingHistory() {
  return detail::g_record_history.load(std::memory_order_relaxed);
}

// The label of the work allocating on this thread (nullptr: none set, or
// not recording).
inline const char* currentAllocLabel() {
  return recordingHistory() ? detail::tls_alloc_label : nullptr;
}

// Labels the allocations made in its scope while recording. The outermost
// label wins: an op that allocates through other entry points
// (empty_strided, resize) keeps its own name. `label` must outlive the
// process (a string literal or an op's interned name).
class AllocLabel {
 public:
  explicit AllocLabel(const char* label) {
    if (recordingHistory() && !detail::tls_alloc_label) {
      detail::tls_alloc_label = label;
      set_ = true;
    }
  }
  ~AllocLabel() {
    if (set_) detail::tls_alloc_label = nullptr;
  }
  AllocLabel(const AllocLabel&) = delete;
  AllocLabel& operator=(const AllocLabel&) = delete;

 private:
  bool set_ = false;
};

// Turns history recording on or off. `python_stacks`: capture the Python
// stack of each allocation and free (on threads that hold the GIL, i.e. the
// user's; frees on device workers have no Python stack). `max_entries`
// bounds the event trace of each device.
void setRecordHistory(bool enabled, bool python_stacks, size_t max_entries);
size_t historyMaxEntries();

// The Python stack of the calling thread when recording with stacks and the
// thread is a Python thread; nullptr otherwise. Takes the GIL: call it
// without holding allocator locks.
std::shared_ptr<c10::GatheredContext> gatherAllocContext();

}  // namespace torch_neuronx
