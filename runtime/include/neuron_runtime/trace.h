// Work-item trace: start/end time and label of each executed item.
//
// Off by default; when enabled each stream worker appends one record per
// item. The profiler reads these records; tests use them to check ordering
// and concurrency.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace neuron_rt {

struct TraceRecord {
  int device;
  int stream;
  uint64_t seq;       // the item's sequence number on its stream
  const char* label;  // static string (op name) — lives for the process
  int64_t start_ns;   // steady clock
  int64_t end_ns;
  bool skipped;  // not run because its stream was poisoned
};

class Trace {
 public:
  static constexpr size_t kMaxRecords = 1 << 20;

  void enable(bool on) { enabled_.store(on, std::memory_order_relaxed); }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void add(const TraceRecord& r);
  // Returns and clears the records collected so far.
  std::vector<TraceRecord> drain();
  uint64_t dropped() const { return dropped_; }

 private:
  std::atomic<bool> enabled_{false};
  std::mutex mu_;
  std::vector<TraceRecord> records_;
  uint64_t dropped_ = 0;
};

int64_t nowNs();

}  // namespace neuron_rt
