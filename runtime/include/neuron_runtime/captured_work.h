// Work items kept to run together as one item: a batch (a compiled program's
// steps, run once) or work captured from a stream (Stream::beginCapture /
// endCapture), replayed as many times as wanted: the analogue of a CUDA
// graph. The items are the very work items the host queued (a compiled
// program, an eager op), kept instead of run and destroyed; replaying runs
// them again in order, over the same device memory, with no host work.
#pragma once
#include <cstddef>
#include <functional>
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
  // The step's task (null for a step that is a plain function): what an
  // eager step computes, for adaptive eager's fusion (sequence_fusion.h).
  Task* stepTask(size_t i) const { return steps_.at(i).task.get(); }
  const ItemNote& stepNote(size_t i) const { return steps_.at(i).note; }

  // Runs every step in order; a failing one ends the run, and the error
  // names the step and `label` (the batch or graph): "step (3 of label)".
  // While the item running it is traced, each step is a child record.
  void run(const char* label) const;
  // Runs step `i` alone, as run() runs each.
  void runStep(size_t i, const char* label) const;
  // Runs steps [first, last) as ONE step: `fused` computes what they would,
  // instead of their own code. Traced as one child labelled `fused_label`
  // with `note`, followed by one child per step it covers, marked as inside
  // it (ItemNote::fused_into). A failure names the first step.
  void runFused(size_t first, size_t last, const char* label,
                const char* fused_label, ItemNote note,
                const std::function<void()>& fused) const;

 private:
  uint64_t id_;
  std::vector<Step> steps_;
};

// Held items run once, in order, as ONE work item labelled `label` (a batch,
// a part of an adaptive sequence).
// A part of an adaptive sequence (`sequence` != 0, its id) runs through the
// held-sequence runner when one is set (sequence_fusion.h): adaptive eager's
// fusion of its steps.
class HeldItemsTask final : public Task {
 public:
  explicit HeldItemsTask(const char* label, uint64_t sequence = 0)
      : label_(label), sequence_(sequence), work_(0) {}
  CapturedWork& work() { return work_; }
  void run() override;

 private:
  const char* label_;
  uint64_t sequence_;
  CapturedWork work_;
};

// One replay of captured work, as a work item labelled `label`.
TaskPtr replayTask(std::shared_ptr<const CapturedWork> work, const char* label);

}  // namespace neuron_rt
