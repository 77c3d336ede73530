// Micro-benchmark of a stream's hot path (not a test): the host's cost of
// queueing a tiny item and the time per item through the worker, for plain
// items, items held by a batch, items with adaptive eager switched on (and
// signed, so sequences are matched and held), and replays of captured work.
// Each figure is the best of `rounds` runs of `items` items.
//
//   stream_bench [items=100000] [rounds=7]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>

#include "neuron_runtime/captured_work.h"
#include "neuron_runtime/sequence_adapter.h"
#include "neuron_runtime/stream.h"

using neuron_rt::Stream;
using Clock = std::chrono::steady_clock;

namespace {

double ns(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::nano>(b - a).count();
}

class AddTask final : public neuron_rt::Task {
 public:
  explicit AddTask(long* x) : x_(x) {}
  void run() override { ++*x_; }

 private:
  long* x_;
};

struct Figure {
  double enqueue_ns = 1e30;  // host ns per item, queueing only
  double total_ns = 1e30;    // ns per item, queueing until synchronized
};

// `queue(s, i)` queues item i on `s`.
Figure measure(int items, int rounds,
               const std::function<void(Stream&, int)>& queue,
               const std::function<void(Stream&)>& before = nullptr,
               const std::function<void(Stream&)>& after = nullptr) {
  Figure f;
  Stream s(0, 1, 0, nullptr);
  for (int r = 0; r < rounds + 1; ++r) {  // the first round warms up
    if (before) before(s);
    auto t0 = Clock::now();
    for (int i = 0; i < items; ++i) queue(s, i);
    auto t1 = Clock::now();
    if (after) after(s);
    s.synchronize();
    auto t2 = Clock::now();
    if (r == 0) continue;
    f.enqueue_ns = std::min(f.enqueue_ns, ns(t0, t1) / items);
    f.total_ns = std::min(f.total_ns, ns(t0, t2) / items);
  }
  return f;
}

void print(const char* what, const Figure& f) {
  std::printf("%-34s %8.1f ns/item queued %8.1f ns/item run\n", what,
              f.enqueue_ns, f.total_ns);
}

}  // namespace

int main(int argc, char** argv) {
  const int items = argc > 1 ? std::atoi(argv[1]) : 100000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  long x = 0;
  std::printf("%d items, best of %d rounds\n", items, rounds);
  print("function item", measure(items, rounds, [&](Stream& s, int) {
          s.enqueue("add", [&x] { ++x; });
        }));
  print("task item", measure(items, rounds, [&](Stream& s, int) {
          s.enqueue("add", std::make_unique<AddTask>(&x));
        }));
  print("task item, batched (1000/batch)",
        measure(
            items, rounds,
            [&](Stream& s, int i) {
              if (i % 1000 == 0) s.beginBatch("program");
              s.enqueue("add", std::make_unique<AddTask>(&x));
              if (i % 1000 == 999) s.endBatch();
            },
            nullptr, [](Stream& s) { s.endBatch(); }));
  neuron_rt::adaptiveSettings().enabled = true;
  print("task item, adaptive (period 16)",
        measure(items, rounds, [&](Stream& s, int i) {
          neuron_rt::signNextItem(1 + i % 16);
          s.enqueue("add", std::make_unique<AddTask>(&x));
        }));
  neuron_rt::adaptiveSettings().enabled = false;
  {
    Stream cap(0, 2, 0, nullptr);
    cap.beginCapture(1);
    for (int i = 0; i < 100; ++i)
      cap.enqueue("add", std::make_unique<AddTask>(&x));
    std::shared_ptr<const neuron_rt::CapturedWork> work = cap.endCapture();
    Figure f = measure(items / 100, rounds,
                       [&](Stream& s, int) { s.replay(work, "graph"); });
    f.enqueue_ns /= 100;
    f.total_ns /= 100;
    print("captured step (replays of 100)", f);
  }
  std::printf("(checksum %ld)\n", x);
  return 0;
}
