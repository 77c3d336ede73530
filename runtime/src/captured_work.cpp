#include "neuron_runtime/captured_work.h"

#include <exception>
#include <stdexcept>
#include <string>

#include "neuron_runtime/status.h"
#include "neuron_runtime/stream.h"
#include "neuron_runtime/trace.h"

namespace neuron_rt {

void CapturedWork::run(const char* label) const {
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& s = steps_[i];
    auto where = [&] {
      return std::string(s.label) + " (step " + std::to_string(i + 1) + " of " +
             label + "): ";
    };
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
    } catch (const Error& e) {
      throw StepError(e.status(), s.label, static_cast<int>(i + 1), e.what(),
                      where() + e.what());
    } catch (const std::exception& e) {
      throw StepError(Status::kDeviceError, s.label, static_cast<int>(i + 1),
                      e.what(), where() + e.what());
    }
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
