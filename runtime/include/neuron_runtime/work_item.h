// What a stream runs: a work item's kind and code, and an item held (by a
// batch, adaptive eager or a capture) before it is queued.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "neuron_runtime/trace.h"

namespace neuron_rt {

enum class ItemKind : uint8_t {
  kCompute,  // skipped when the stream is poisoned
  kCopy,     // skipped when the stream is poisoned
  kMarker,   // always runs (event record / wait)
};

// Device work with state of its own, the state and the code in one object:
// one allocation per item, where a std::function holding a pointer to its
// state takes two. Like a WorkFn, it is destroyed by the host once it has run.
class Task {
 public:
  virtual ~Task() = default;
  virtual void run() = 0;
  // Adaptive eager held the item and now lets it go, as part of ONE item
  // (on the host, in stream order): an eager op notes what it needs to know
  // then (sequence_fusion.h: which of its tensors the host still holds).
  virtual void released() {}
};
using TaskPtr = std::unique_ptr<Task>;

using WorkFn = std::function<void()>;

// An item that is not queued yet: what the host gave to Stream::enqueue.
struct WorkItem {
  const char* label = "";  // lives for the process
  ItemKind kind = ItemKind::kCompute;
  WorkFn fn;
  TaskPtr task;   // instead of fn
  ItemNote note;  // what the host said of it (while tracing)
};

}  // namespace neuron_rt
