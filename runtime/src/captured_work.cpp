#include "neuron_runtime/captured_work.h"

#include <atomic>
#include <exception>
#include <stdexcept>
#include <string>

#include "neuron_runtime/sequence_fusion.h"
#include "neuron_runtime/status.h"
#include "neuron_runtime/stream.h"
#include "neuron_runtime/trace.h"

namespace neuron_rt {

void CapturedWork::run(const char* label) const {
  for (size_t i = 0; i < steps_.size(); ++i) runStep(i, label);
}

namespace {

[[noreturn]] void rethrowAsStepError(const char* step_label, size_t i,
                                     const char* label) {
  auto where = [&](const char* what) {
    return std::string(step_label) + " (step " + std::to_string(i + 1) +
           " of " + label + "): " + what;
  };
  try {
    throw;
  } catch (const Error& e) {
    throw StepError(e.status(), step_label, static_cast<int>(i + 1), e.what(),
                    where(e.what()));
  } catch (const std::exception& e) {
    throw StepError(Status::kDeviceError, step_label, static_cast<int>(i + 1),
                    e.what(), where(e.what()));
  }
}

}  // namespace

void CapturedWork::runStep(size_t i, const char* label) const {
  const Step& s = steps_[i];
  const bool traced = tracingRunningItem();
  const int64_t start = traced ? nowNs() : 0;
  int64_t outer_estimate = -1;
  if (traced) {  // a step's own estimate (an NKI kernel's) is the step's
    outer_estimate = runningItem().estimate_ns;
    runningItem().estimate_ns = -1;
  }
  try {
    if (i > 0) runWorkerItemHook();  // each step starts afresh, as an item
    if (s.task)
      s.task->run();
    else
      s.fn();
    if (traced) {
      ItemNote note = s.note;
      if (!note.set) note.category = ItemCategory::kStep;
      if (runningItem().estimate_ns >= 0) {
        note.estimate_ns = runningItem().estimate_ns;
        note.has_parts = false;  // a cost model's total
      }
      runningItem().estimate_ns = outer_estimate;
      traceChild(s.label, start, nowNs(), std::move(note));
    }
  } catch (...) {
    rethrowAsStepError(s.label, i, label);
  }
}

void CapturedWork::runFused(size_t first, size_t last, const char* label,
                            const char* fused_label, ItemNote note,
                            const std::function<void()>& fused) const {
  const bool traced = tracingRunningItem();
  const int64_t start = traced ? nowNs() : 0;
  try {
    if (first > 0) runWorkerItemHook();
    fused();
  } catch (...) {
    rethrowAsStepError(steps_[first].label, first, label);
  }
  if (!traced) return;
  const int64_t end = nowNs();
  const int32_t at = runningItem().children;
  note.category = ItemCategory::kFused;
  note.set = true;
  traceChild(fused_label, start, end, std::move(note));
  for (size_t i = first; i < last; ++i) {
    ItemNote inside = steps_[i].note;
    if (!inside.set) inside.category = ItemCategory::kStep;
    inside.fused_into = at;
    traceChild(steps_[i].label, start, end, std::move(inside));
  }
}

namespace {
std::atomic<HeldSequenceRunner*> g_runner{nullptr};
}  // namespace

void setHeldSequenceRunner(HeldSequenceRunner* runner) {
  g_runner.store(runner, std::memory_order_release);
}
HeldSequenceRunner* heldSequenceRunner() {
  return g_runner.load(std::memory_order_acquire);
}

void HeldItemsTask::run() {
  if (sequence_ == 0) {  // a batch: its failures name the step and the batch
    work_.run(label_);
    return;
  }
  // A part of an adaptive sequence is the user's eager ops, replayed: a
  // failing op is reported as plain eager reports it.
  try {
    if (HeldSequenceRunner* runner = heldSequenceRunner())
      runner->run(work_, label_, sequence_);
    else
      work_.run(label_);
  } catch (const StepError& e) {
    throw OpError(e.status(), e.step(), e.stepMessage());
  }
}

namespace {

class ReplayTask final : public Task {
 public:
  ReplayTask(std::shared_ptr<const CapturedWork> work, const char* label)
      : work_(std::move(work)), label_(label) {}
  void run() override { work_->run(label_); }

 private:
  std::shared_ptr<const CapturedWork> work_;
  const char* label_;
};

}  // namespace

TaskPtr replayTask(std::shared_ptr<const CapturedWork> work,
                   const char* label) {
  return std::make_unique<ReplayTask>(std::move(work), label);
}

}  // namespace neuron_rt
