#include "neuron_runtime/work_capture.h"

#include <utility>

#include "neuron_runtime/status.h"

namespace neuron_rt {

void WorkCapture::begin(uint64_t id) {
  if (id == 0) throw Error(Status::kInvalidArgument, "capture id must be > 0");
  std::lock_guard<std::mutex> g(mu_);
  if (work_)
    throw Error(Status::kCaptureInvalid,
                "the stream is already capturing (captures do not nest)");
  work_ = std::make_shared<CapturedWork>(id);
  invalid_.clear();
  id_.store(id, std::memory_order_release);
}

std::shared_ptr<CapturedWork> WorkCapture::end() {
  std::shared_ptr<CapturedWork> work;
  std::string invalid;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!work_)
      throw Error(Status::kCaptureInvalid, "the stream is not capturing");
    work.swap(work_);
    invalid.swap(invalid_);
    id_.store(0, std::memory_order_release);
  }
  if (!invalid.empty())
    throw Error(Status::kCaptureInvalid,
                "the capture was invalidated: " + invalid +
                    " is not permitted while the "
                    "stream is capturing");
  return work;
}

bool WorkCapture::record(const char* label, WorkFn& fn, TaskPtr& task,
                         ItemNote* note) {
  if (!active()) return false;
  std::lock_guard<std::mutex> g(mu_);
  if (!work_) return false;
  work_->add(label, std::move(fn), std::move(task),
             note ? std::move(*note) : ItemNote{});
  return true;
}

void WorkCapture::reject(const char* what) {
  if (!active()) return;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!work_) return;
    if (invalid_.empty()) invalid_ = what;
  }
  throw Error(
      Status::kCaptureInvalid,
      std::string(what) + ": operation not permitted when stream is capturing");
}

}  // namespace neuron_rt
