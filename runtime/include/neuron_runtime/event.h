// Events: a point in a stream's sequence of work items.
//
// record(s) queues a marker on s; when the marker runs the event is complete
// and stamped with the time. block(s) makes stream s wait (on the device) for
// the most recent record at the time of the call, so waits can never form a
// cycle. Markers run even on a poisoned stream, so waiters never hang.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

namespace neuron_rt {

class Stream;

class Event {
 public:
  Event();

  void record(Stream& stream);
  void block(Stream& stream) const;
  bool query() const;        // true if never recorded or last record done
  void synchronize() const;  // host waits for the last record
  bool recorded() const;
  // Milliseconds from this event's completion to `end`'s. Both must have
  // been recorded and have completed; throws neuron_rt::Error otherwise.
  double elapsedMs(const Event& end) const;
  int device() const;  // device of the last record, -1 if none

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    uint64_t recorded_gen = 0;
    uint64_t completed_gen = 0;
    int64_t time_ns = 0;
    int device = -1;
    // The stream and item of the last record, so synchronize() can wait
    // for the marker item itself to be complete (not only signalled).
    Stream* stream = nullptr;
    uint64_t seq = 0;
  };
  std::shared_ptr<State> state_;
};

}  // namespace neuron_rt
