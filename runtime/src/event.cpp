#include "neuron_runtime/event.h"

#include "neuron_runtime/status.h"
#include "neuron_runtime/stream.h"
#include "neuron_runtime/trace.h"

namespace neuron_rt {

Event::Event() : state_(std::make_shared<State>()) {}

void Event::record(Stream& stream) {
  // The marker is queued while holding the lock, so that a block() which
  // sees this generation always finds its marker already queued. Otherwise a
  // concurrent block() on the same stream could queue its wait ahead of the
  // record it waits for, and the stream would wait on itself forever.
  std::lock_guard<std::mutex> g(state_->mu);
  const uint64_t gen = ++state_->recorded_gen;
  state_->device = stream.device();
  std::shared_ptr<State> st = state_;
  state_->stream = &stream;
  state_->seq = stream.enqueue(
      "event_record",
      [st, gen] {
        std::lock_guard<std::mutex> g(st->mu);
        if (gen > st->completed_gen) {
          st->completed_gen = gen;
          st->time_ns = nowNs();
        }
        st->cv.notify_all();
      },
      ItemKind::kMarker);
}

void Event::block(Stream& stream) const {
  uint64_t gen;
  {
    std::lock_guard<std::mutex> g(state_->mu);
    gen = state_->recorded_gen;
    if (gen == 0 || state_->completed_gen >= gen) return;
  }
  std::shared_ptr<State> st = state_;
  stream.enqueue(
      "event_wait",
      [st, gen] {
        std::unique_lock<std::mutex> lk(st->mu);
        st->cv.wait(lk, [&] { return st->completed_gen >= gen; });
      },
      ItemKind::kMarker);
}

bool Event::query() const {
  std::lock_guard<std::mutex> g(state_->mu);
  return state_->completed_gen >= state_->recorded_gen;
}

void Event::synchronize() const {
  Stream* stream;
  uint64_t seq;
  {
    std::unique_lock<std::mutex> lk(state_->mu);
    uint64_t gen = state_->recorded_gen;
    state_->cv.wait(lk, [&] { return state_->completed_gen >= gen; });
    stream = state_->stream;
    seq = state_->seq;
  }
  // The marker has signalled; wait until its item is complete too, so the
  // stream reports idle if the event was its last item.
  if (stream) stream->waitFor(seq);
}

bool Event::recorded() const {
  std::lock_guard<std::mutex> g(state_->mu);
  return state_->recorded_gen > 0;
}

int Event::device() const {
  std::lock_guard<std::mutex> g(state_->mu);
  return state_->device;
}

double Event::elapsedMs(const Event& end) const {
  int64_t t0, t1;
  {
    std::lock_guard<std::mutex> g(state_->mu);
    if (state_->recorded_gen == 0 ||
        state_->completed_gen < state_->recorded_gen)
      throw Error(Status::kInvalidArgument,
                  "elapsed_time: the start event has not been recorded or has "
                  "not completed yet");
    t0 = state_->time_ns;
  }
  {
    std::lock_guard<std::mutex> g(end.state_->mu);
    if (end.state_->recorded_gen == 0 ||
        end.state_->completed_gen < end.state_->recorded_gen)
      throw Error(Status::kInvalidArgument,
                  "elapsed_time: the end event has not been recorded or has "
                  "not completed yet");
    t1 = end.state_->time_ns;
  }
  return static_cast<double>(t1 - t0) / 1e6;
}

}  // namespace neuron_rt
