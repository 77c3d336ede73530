// Work items kept to run together as one item: a batch (a compiled program's
// steps, run once) or work captured from a stream (Stream::beginCapture /
// endCapture), replayed as many times as wanted: the analogue of a CUDA
// graph. The items are the very work items the host queued (a compiled
// program, an eager op), kept instead of run and destroyed; replaying runs
// them again in order, over the same device memory, with no host work.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "neuron_runtime/work_item.h"

namespace neuron_rt {

class CapturedWork {
 public:
  struct Step {
    const char* label;
    WorkFn fn;
    TaskPtr task;   // instead of fn
    ItemNote note;  // what the host said of it (while tracing)
  };

  explicit CapturedWork(uint64_t id) : id_(id) {}
  CapturedWork(const CapturedWork&) = delete;
  CapturedWork& operator=(const CapturedWork&) = delete;

  void add(const char* label, WorkFn fn, TaskPtr task, ItemNote note = {}) {
    steps_.push_back(
        Step{label, std::move(fn), std::move(task), std::move(note)});
  }
  void add(WorkItem&& item) {
    add(item.label, std::move(item.fn), std::move(item.task),
        std::move(item.note));
  }

  void reserve(size_t steps) { steps_.reserve(steps); }
  uint64_t id() const { return id_; }
  size_t size() const { return steps_.size(); }
  const char* stepLabel(size_t i) const { return steps_.at(i).label; }

  // Runs every step in order; a failing one ends the run, and the error
  // names the step and `label` (the batch or graph): "step (3 of label)".
  // While the item running it is traced, each step is a child record.
  void run(const char* label) const;

 private:
  uint64_t id_;
  std::vector<Step> steps_;
};

// Held items run once, in order, as ONE work item labelled `label` (a batch,
// a part of an adaptive sequence).
class HeldItemsTask final : public Task {
 public:
  explicit HeldItemsTask(const char* label) : label_(label), work_(0) {}
  CapturedWork& work() { return work_; }
  void run() override { work_.run(label_); }

 private:
  const char* label_;
  CapturedWork work_;
};

// One replay of captured work, as a work item labelled `label`.
TaskPtr replayTask(std::shared_ptr<const CapturedWork> work, const char* label);

}  // namespace neuron_rt
