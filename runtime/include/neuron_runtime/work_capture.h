// A stream's capture (the runtime half of torch.neuron graphs): between
// begin() and end(), the compute and copy items the stream would queue are
// recorded into a CapturedWork instead; end() hands it over, to be replayed
// as one item as often as wanted.
//
// While capturing, a marker (event record or wait) or a host wait is not
// permitted: reject() invalidates the capture, naming the first such call,
// and throws Error(kCaptureInvalid); end() then throws too. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "neuron_runtime/captured_work.h"
#include "neuron_runtime/work_item.h"

namespace neuron_rt {

class WorkCapture {
 public:
  WorkCapture() = default;
  WorkCapture(const WorkCapture&) = delete;
  WorkCapture& operator=(const WorkCapture&) = delete;

  // `id` (non-zero) tags the capture (the allocator keeps the memory
  // allocated during it for the replays). Captures do not nest.
  void begin(uint64_t id);
  std::shared_ptr<CapturedWork> end();
  bool active() const { return id() != 0; }
  uint64_t id() const { return id_.load(std::memory_order_acquire); }

  // Records the item if capturing (its fn/task/note are moved from); false
  // if not. `note` may be null (not tracing).
  bool record(const char* label, WorkFn& fn, TaskPtr& task, ItemNote* note);
  // `what` (a marker's label, "a stream synchronize") is not permitted while
  // capturing: if capturing, invalidates the capture and throws.
  void reject(const char* what);

 private:
  std::atomic<uint64_t> id_{0};
  mutable std::mutex mu_;  // work_ and invalid_
  std::shared_ptr<CapturedWork> work_;
  std::string invalid_;  // why the capture is invalid ("" if it is not)
};

}  // namespace neuron_rt
