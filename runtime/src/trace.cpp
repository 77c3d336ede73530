#include "neuron_runtime/trace.h"

#include <chrono>

namespace neuron_rt {

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Trace::add(const TraceRecord& r) {
  std::lock_guard<std::mutex> g(mu_);
  if (records_.size() >= kMaxRecords) {
    ++dropped_;
    return;
  }
  records_.push_back(r);
}

std::vector<TraceRecord> Trace::drain() {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<TraceRecord> out;
  out.swap(records_);
  return out;
}

}  // namespace neuron_rt
