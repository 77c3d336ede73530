#include "neuron_runtime/stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "neuron_runtime/trace.h"
#include "test_util.h"

namespace neuron_rt {
namespace {

using neuron_rt_test::Gate;

TEST(StreamTest, Accessors) {
  Stream s(3, 17, -1, nullptr);
  EXPECT_EQ(s.device(), 3);
  EXPECT_EQ(s.id(), 17);
  EXPECT_EQ(s.priority(), -1);
  EXPECT_EQ(s.lastEnqueued(), 0u);
  EXPECT_EQ(s.lastCompleted(), 0u);
  EXPECT_FALSE(s.hasError());
}

TEST(StreamTest, EmptyStreamIsIdle) {
  Stream s(0, 0, 0, nullptr);
  EXPECT_TRUE(s.query());
  s.synchronize();  // returns at once
  s.waitFor(0);
  EXPECT_FALSE(s.takeError().has_value());
}

TEST(StreamTest, RunsManyItemsInFifoOrder) {
  constexpr int kItems = 20000;
  std::vector<int> order;  // touched only by the worker until synchronize()
  order.reserve(kItems);
  Stream s(0, 1, 0, nullptr);
  for (int i = 0; i < kItems; ++i) {
    uint64_t seq = s.enqueue("push", [&order, i] { order.push_back(i); });
    ASSERT_EQ(seq, static_cast<uint64_t>(i + 1));
  }
  EXPECT_EQ(s.lastEnqueued(), static_cast<uint64_t>(kItems));
  s.synchronize();
  EXPECT_EQ(s.lastCompleted(), static_cast<uint64_t>(kItems));
  EXPECT_TRUE(s.query());
  ASSERT_EQ(order.size(), static_cast<size_t>(kItems));
  for (int i = 0; i < kItems; ++i) ASSERT_EQ(order[i], i);
}

TEST(StreamTest, ItemsFromSeveralProducersKeepPerProducerOrder) {
  constexpr int kPerProducer = 3000;
  std::vector<std::pair<int, int>> ran;  // (producer, i), worker-only
  std::vector<std::vector<uint64_t>> seqs(2);
  Stream s(0, 1, 0, nullptr);
  auto produce = [&](int producer) {
    for (int i = 0; i < kPerProducer; ++i)
      seqs[producer].push_back(s.enqueue(
          "push", [&ran, producer, i] { ran.emplace_back(producer, i); }));
  };
  std::thread t0(produce, 0), t1(produce, 1);
  t0.join();
  t1.join();
  s.synchronize();
  ASSERT_EQ(ran.size(), static_cast<size_t>(2 * kPerProducer));
  int next[2] = {0, 0};
  for (auto [producer, i] : ran) ASSERT_EQ(i, next[producer]++);
  // Sequence numbers are unique, increasing per producer, and cover 1..N.
  std::vector<bool> seen(2 * kPerProducer + 1, false);
  for (const auto& v : seqs)
    for (size_t i = 0; i < v.size(); ++i) {
      ASSERT_GE(v[i], 1u);
      ASSERT_LE(v[i], static_cast<uint64_t>(2 * kPerProducer));
      ASSERT_FALSE(seen[v[i]]);
      seen[v[i]] = true;
      if (i > 0) ASSERT_GT(v[i], v[i - 1]);
    }
}

TEST(StreamTest, SynchronizeWaitsForQueuedWork) {
  std::atomic<bool> first_done{false}, last_done{false};
  Stream s(0, 1, 0, nullptr);
  Gate gate;
  s.enqueue("blocked", [w = gate.waiter(), &first_done] {
    w.wait();
    first_done = true;
  });
  s.enqueue("after", [&] { last_done = true; });

  // The gate is closed, so nothing after the first item can have finished.
  EXPECT_FALSE(s.query());
  EXPECT_FALSE(last_done.load());
  EXPECT_EQ(s.lastCompleted(), 0u);

  // A host thread synchronizing sees every item done once it returns.
  auto synced = std::async(std::launch::async, [&] {
    s.synchronize();
    return first_done.load() && last_done.load();
  });
  gate.open();
  EXPECT_TRUE(synced.get());
  EXPECT_TRUE(s.query());
  EXPECT_EQ(s.lastCompleted(), 2u);
}

TEST(StreamTest, WaitForReturnsOnceThatItemHasRun) {
  std::atomic<bool> first_done{false};
  Stream s(0, 1, 0, nullptr);
  Gate gate;
  uint64_t first = s.enqueue("first", [&] { first_done = true; });
  uint64_t second = s.enqueue("blocked", [w = gate.waiter()] { w.wait(); });
  s.waitFor(first);
  EXPECT_TRUE(first_done.load());
  EXPECT_GE(s.lastCompleted(), first);
  // The second item is still blocked on the gate.
  EXPECT_LT(s.lastCompleted(), second);
  EXPECT_FALSE(s.query());
  gate.open();
  s.waitFor(second);
  EXPECT_TRUE(s.query());
}

// Host threads waiting for different items each wake once their own item
// has run (the worker wakes sleepers only when the lowest target is reached,
// and those not yet done must register again).
TEST(StreamTest, WaitersForDifferentItemsEachWakeAtTheirItem) {
  Stream s(0, 1, 0, nullptr);
  std::vector<Gate> gates(4);
  std::vector<uint64_t> seqs;
  for (Gate& g : gates)
    seqs.push_back(s.enqueue("gated", [w = g.waiter()] { w.wait(); }));
  std::vector<std::atomic<bool>> woke(seqs.size());
  std::vector<std::thread> waiters;
  // Targets registered from the highest down, so the lowest lands last.
  for (size_t i = seqs.size(); i-- > 0;) {
    waiters.emplace_back([&, i] {
      s.waitFor(seqs[i]);
      woke[i] = true;
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // all asleep
  for (size_t i = 0; i < gates.size(); ++i) {
    gates[i].open();
    s.waitFor(seqs[i]);
    // Waiters for later items stay asleep; this one wakes.
    for (size_t j = i + 1; j < seqs.size(); ++j) EXPECT_FALSE(woke[j].load());
  }
  for (auto& t : waiters) t.join();
  for (auto& w : woke) EXPECT_TRUE(w.load());
}

TEST(StreamTest, ManyWaitersOnARunningQueueAllReturn) {
  constexpr int kItems = 20000;
  constexpr int kWaiters = 8;
  Stream s(0, 1, 0, nullptr);
  std::atomic<int> done{0};
  std::vector<std::thread> waiters;
  for (int w = 0; w < kWaiters; ++w) {
    waiters.emplace_back([&, w] {
      for (int k = 1; k <= 200; ++k) {
        // Targets ahead of the worker and behind it, interleaved.
        uint64_t target = static_cast<uint64_t>((k * 97 + w * 13) % kItems) + 1;
        while (s.lastEnqueued() < target) std::this_thread::yield();
        s.waitFor(target);
        EXPECT_GE(s.lastCompleted(), target);
      }
      done++;
    });
  }
  for (int i = 0; i < kItems; ++i) {
    s.enqueue("spin", [] {
      volatile int x = 0;
      for (int j = 0; j < 200; ++j) x = x + j;
    });
  }
  for (auto& t : waiters) t.join();
  EXPECT_EQ(done.load(), kWaiters);
  s.synchronize();
}

TEST(StreamTest, QueryReflectsProgress) {
  Stream s(0, 1, 0, nullptr);
  Gate gate;
  s.enqueue("blocked", [w = gate.waiter()] { w.wait(); });
  EXPECT_FALSE(s.query());
  gate.open();
  s.synchronize();
  EXPECT_TRUE(s.query());
  s.enqueue("noop", [] {});
  s.synchronize();
  EXPECT_TRUE(s.query());
}

TEST(StreamTest, WorkerIsReusedAfterIdling) {
  // Alternate queuing and synchronising so the worker goes idle (and sleeps)
  // between items; each new item must wake it.
  int count = 0;
  Stream s(0, 1, 0, nullptr);
  for (int i = 0; i < 200; ++i) {
    s.enqueue("inc", [&count] { ++count; });
    s.synchronize();
    ASSERT_EQ(count, i + 1);
  }
}

TEST(StreamTest, ThrowingItemPoisonsStreamUntilTakeError) {
  std::vector<int> ran;  // worker-only until synchronize()
  Stream s(4, 9, 0, nullptr);
  s.enqueue("ok", [&] { ran.push_back(1); });
  uint64_t bad = s.enqueue(
      "bad_op", [] { throw std::runtime_error("simulated device fault"); });
  s.enqueue("compute_after", [&] { ran.push_back(3); });
  s.enqueue("copy_after", [&] { ran.push_back(4); }, ItemKind::kCopy);
  s.enqueue("marker_after", [&] { ran.push_back(5); }, ItemKind::kMarker);
  s.enqueue("compute_after2", [&] { ran.push_back(6); });
  s.synchronize();

  // Compute and copy items after the failure were skipped; the marker ran.
  EXPECT_EQ(ran, (std::vector<int>{1, 5}));
  // Skipped items still count as completed, so waiters never hang.
  EXPECT_EQ(s.lastCompleted(), 6u);
  EXPECT_TRUE(s.hasError());

  auto err = s.takeError();
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->device, 4);
  EXPECT_EQ(err->stream, 9);
  EXPECT_EQ(err->seq, bad);
  EXPECT_EQ(err->label, "bad_op");
  EXPECT_EQ(err->message, "simulated device fault");

  // The error is handed out once and the stream works again.
  EXPECT_FALSE(s.hasError());
  EXPECT_FALSE(s.takeError().has_value());
  s.enqueue("compute_recovered", [&] { ran.push_back(7); });
  s.enqueue("copy_recovered", [&] { ran.push_back(8); }, ItemKind::kCopy);
  s.synchronize();
  EXPECT_EQ(ran, (std::vector<int>{1, 5, 7, 8}));
  EXPECT_FALSE(s.hasError());
}

TEST(StreamTest, OnlyTheFirstErrorIsKept) {
  Stream s(0, 1, 0, nullptr);
  s.enqueue("first_bad", [] { throw std::runtime_error("first"); });
  // Markers still run on a poisoned stream; one that throws must not
  // replace the original error.
  s.enqueue(
      "bad_marker", [] { throw std::runtime_error("second"); },
      ItemKind::kMarker);
  s.synchronize();
  auto err = s.takeError();
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->seq, 1u);
  EXPECT_EQ(err->label, "first_bad");
  EXPECT_EQ(err->message, "first");
}

TEST(StreamTest, NonStandardExceptionIsReported) {
  Stream s(0, 1, 0, nullptr);
  s.enqueue("throws_int", [] { throw 42; });
  s.synchronize();
  auto err = s.takeError();
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->label, "throws_int");
  EXPECT_EQ(err->message, "unknown exception");
}

TEST(StreamTest, ThrowingCopyItemPoisonsToo) {
  bool ran_after = false;
  Stream s(0, 1, 0, nullptr);
  s.enqueue(
      "bad_copy", [] { throw std::runtime_error("dma"); }, ItemKind::kCopy);
  s.enqueue("after", [&] { ran_after = true; });
  s.synchronize();
  EXPECT_FALSE(ran_after);
  auto err = s.takeError();
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->label, "bad_copy");
  EXPECT_EQ(err->message, "dma");
}

TEST(StreamTest, TwoStreamsRunConcurrently) {
  // Stream A's item can only finish once stream B's item has run, so A
  // completing proves B made progress while A was blocked.
  std::promise<void> released;
  std::shared_future<void> release = released.get_future().share();
  std::atomic<bool> a_done{false};
  Stream a(0, 1, 0, nullptr);
  Stream b(0, 2, 0, nullptr);
  a.enqueue("wait_for_b", [release, &a_done] {
    release.wait();
    a_done = true;
  });
  b.enqueue("release_a", [&released] { released.set_value(); });
  a.synchronize();
  b.synchronize();
  EXPECT_TRUE(a_done.load());
}

TEST(StreamTest, BlockedStreamDoesNotHoldUpOthers) {
  int count = 0;
  Stream a(0, 1, 0, nullptr);
  Stream b(0, 2, 0, nullptr);
  Gate gate;
  a.enqueue("blocked", [w = gate.waiter()] { w.wait(); });
  for (int i = 0; i < 1000; ++i) b.enqueue("inc", [&count] { ++count; });
  b.synchronize();  // completes while A is still blocked
  EXPECT_EQ(count, 1000);
  EXPECT_FALSE(a.query());
  gate.open();
  a.synchronize();
  EXPECT_TRUE(a.query());
}

TEST(StreamTest, PingPongBetweenStreams) {
  // Each item of A waits for the matching item of B and vice versa; this
  // only finishes if both workers run at the same time.
  constexpr int kRounds = 50;
  std::vector<std::promise<void>> a_to_b(kRounds), b_to_a(kRounds);
  std::vector<std::future<void>> a_to_b_f, b_to_a_f;
  for (int i = 0; i < kRounds; ++i) {
    a_to_b_f.push_back(a_to_b[i].get_future());
    b_to_a_f.push_back(b_to_a[i].get_future());
  }
  std::vector<int> log;  // guarded by the ping-pong handshake
  Stream a(0, 1, 0, nullptr);
  Stream b(0, 2, 0, nullptr);
  for (int i = 0; i < kRounds; ++i) {
    a.enqueue("ping", [&, i] {
      log.push_back(2 * i);
      a_to_b[i].set_value();
      b_to_a_f[i].wait();
    });
    b.enqueue("pong", [&, i] {
      a_to_b_f[i].wait();
      log.push_back(2 * i + 1);
      b_to_a[i].set_value();
    });
  }
  a.synchronize();
  b.synchronize();
  ASSERT_EQ(log.size(), static_cast<size_t>(2 * kRounds));
  for (int i = 0; i < 2 * kRounds; ++i) EXPECT_EQ(log[i], i);
}

TEST(StreamTest, DestructorDrainsQueuedWork) {
  std::atomic<int> count{0};
  Gate gate;
  auto s = std::make_unique<Stream>(0, 1, 0, nullptr);
  s->enqueue("blocked", [w = gate.waiter()] { w.wait(); });
  for (int i = 0; i < 500; ++i) s->enqueue("inc", [&count] { ++count; });
  EXPECT_EQ(count.load(), 0);  // all of them are behind the gate
  gate.open();
  s.reset();  // runs what is queued, then joins the worker
  EXPECT_EQ(count.load(), 500);
}

TEST(StreamTest, DestructorDrainsWhileBlocked) {
  // The destructor starts while the worker is blocked; it must wait for the
  // item instead of abandoning the queue.
  std::atomic<int> count{0};
  std::promise<void> started;
  Gate gate;
  auto s = std::make_unique<Stream>(0, 1, 0, nullptr);
  s->enqueue("blocked", [&started, w = gate.waiter()] {
    started.set_value();
    w.wait();
  });
  for (int i = 0; i < 100; ++i) s->enqueue("inc", [&count] { ++count; });
  started.get_future().wait();
  std::thread destroyer([&s] { s.reset(); });
  gate.open();
  destroyer.join();
  EXPECT_EQ(count.load(), 100);
}

TEST(StreamTest, DestructorOfUnusedOrPoisonedStream) {
  {
    Stream unused(0, 1, 0, nullptr);
  }
  int markers = 0;
  {
    Stream s(0, 1, 0, nullptr);
    s.enqueue("bad", [] { throw std::runtime_error("x"); });
    s.enqueue("marker", [&markers] { ++markers; }, ItemKind::kMarker);
  }
  EXPECT_EQ(markers, 1);
}

TEST(StreamTest, CapturedStateIsReleasedBeforeCompletion) {
  Stream s(0, 1, 0, nullptr);
  auto resource = std::make_shared<int>(7);
  std::weak_ptr<int> weak = resource;
  s.enqueue("use", [r = std::move(resource)] { (void)*r; });
  s.synchronize();
  EXPECT_TRUE(weak.expired());
}

// A Task counting its runs and, through a flag it does not own, whether it
// has been destroyed.
class CountingTask final : public Task {
 public:
  CountingTask(std::vector<int>* order, int id, std::atomic<int>* destroyed)
      : order_(order), id_(id), destroyed_(destroyed) {}
  ~CountingTask() override { ++*destroyed_; }
  void run() override {
    if (id_ < 0) throw std::runtime_error("task failed");
    order_->push_back(id_);
  }

 private:
  std::vector<int>* order_;
  int id_;
  std::atomic<int>* destroyed_;
};

TEST(StreamTest, TasksAndFunctionsRunInOneFifoOrder) {
  std::vector<int> order;  // worker-only until synchronize()
  std::atomic<int> destroyed{0};
  Stream s(0, 1, 0, nullptr);
  for (int i = 0; i < 1000; ++i) {
    if (i % 2)
      s.enqueue("task", std::make_unique<CountingTask>(&order, i, &destroyed));
    else
      s.enqueue("fn", [&order, i] { order.push_back(i); });
  }
  s.synchronize();
  ASSERT_EQ(order.size(), 1000u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(order[i], i);
  // Released before synchronize() returned, like a function's captures.
  EXPECT_EQ(destroyed.load(), 500);
}

TEST(StreamTest, FailingTaskPoisonsTheStreamLikeAFunction) {
  std::vector<int> order;
  std::atomic<int> destroyed{0};
  Stream s(0, 1, 0, nullptr);
  uint64_t bad = s.enqueue(
      "bad_task", std::make_unique<CountingTask>(&order, -1, &destroyed));
  s.enqueue("skipped", std::make_unique<CountingTask>(&order, 1, &destroyed));
  s.synchronize();
  auto err = s.takeError();
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->seq, bad);
  EXPECT_EQ(err->label, "bad_task");
  EXPECT_EQ(err->message, "task failed");
  EXPECT_TRUE(order.empty());
  EXPECT_EQ(destroyed.load(), 2);
  s.enqueue("after", std::make_unique<CountingTask>(&order, 2, &destroyed));
  s.synchronize();
  EXPECT_EQ(order, std::vector<int>{2});
}

std::atomic<int> g_idle_calls{0};
std::atomic<std::thread::id> g_idle_thread;
void countIdle() {
  g_idle_thread.store(std::this_thread::get_id());
  ++g_idle_calls;
}

TEST(StreamTest, IdleHookRunsOnTheWorkerBeforeItSleeps) {
  setWorkerIdleHook(&countIdle);
  g_idle_calls = 0;
  std::atomic<std::thread::id> worker_id;
  {
    Stream s(0, 1, 0, nullptr);
    s.enqueue("who", [&] { worker_id.store(std::this_thread::get_id()); });
    s.synchronize();
    // Idle long enough for the hook (200 ms after the idle spin).
    for (int i = 0; i < 2000 && g_idle_calls.load() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_GE(g_idle_calls.load(), 1);
    EXPECT_EQ(g_idle_thread.load(), worker_id.load());
    // Work queued after the hook ran still runs.
    std::atomic<bool> ran{false};
    s.enqueue("after", [&] { ran = true; });
    s.synchronize();
    EXPECT_TRUE(ran.load());
  }
  setWorkerIdleHook(nullptr);
}

std::atomic<int> g_item_hook_calls{0};
std::atomic<std::thread::id> g_item_hook_thread;
void countItemHook() {
  g_item_hook_thread.store(std::this_thread::get_id());
  ++g_item_hook_calls;
}

TEST(StreamTest, ItemHookRunsBeforeEveryItemAndEveryStep) {
  setWorkerItemHook(&countItemHook);
  g_item_hook_calls = 0;
  {
    Stream s(0, 1, 0, nullptr);
    std::atomic<std::thread::id> worker_id;
    std::vector<int> calls_seen;  // by each item or step, when it runs
    s.enqueue("a", [&] {
      worker_id.store(std::this_thread::get_id());
      calls_seen.push_back(g_item_hook_calls.load());
    });
    s.enqueue("b", [&] { calls_seen.push_back(g_item_hook_calls.load()); });
    s.beginBatch("batch");
    s.enqueue("step1", [&] { calls_seen.push_back(g_item_hook_calls.load()); });
    s.enqueue("step2", [&] { calls_seen.push_back(g_item_hook_calls.load()); });
    s.endBatch();
    s.synchronize();
    EXPECT_EQ(calls_seen, (std::vector<int>{1, 2, 3, 4}));
    EXPECT_EQ(g_item_hook_thread.load(), worker_id.load());
  }
  setWorkerItemHook(nullptr);
}

// ---------------------------------------------------------------------------
// Trace

TEST(StreamBatchTest, HeldItemsRunInOrderAsOneItem) {
  Stream s(0, 0, 0, nullptr);
  std::vector<int> order;
  s.enqueue("before", [&] { order.push_back(0); });
  s.beginBatch("program");
  EXPECT_TRUE(s.batching());
  for (int i = 1; i <= 5; ++i)
    s.enqueue("step", [&, i] { order.push_back(i); });
  EXPECT_EQ(s.lastEnqueued(), 1u);  // held, not queued
  EXPECT_FALSE(s.query());
  s.endBatch();
  EXPECT_FALSE(s.batching());
  EXPECT_EQ(s.lastEnqueued(), 2u);  // the five steps: one item
  s.enqueue("after", [&] { order.push_back(6); });
  s.synchronize();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
}

TEST(StreamBatchTest, WaitingFlushesTheBatchAndBatchingGoesOn) {
  Stream s(0, 0, 0, nullptr);
  std::atomic<int> ran{0};
  s.beginBatch("program");
  s.enqueue("a", [&] { ++ran; });
  s.enqueue("b", [&] { ++ran; });
  s.synchronize();  // must not wait for items never queued
  EXPECT_EQ(ran.load(), 2);
  s.enqueue("c", [&] { ++ran; });
  EXPECT_TRUE(s.batching());
  s.endBatch();
  s.synchronize();
  EXPECT_EQ(ran.load(), 3);
  EXPECT_EQ(s.lastEnqueued(), 2u);
}

TEST(StreamBatchTest, MarkersGoAfterWhatWasHeld) {
  Stream s(0, 0, 0, nullptr);
  std::vector<std::string> order;
  s.beginBatch("program");
  s.enqueue("a", [&] { order.push_back("a"); });
  s.enqueue("marker", [&] { order.push_back("marker"); }, ItemKind::kMarker);
  s.enqueue("b", [&] { order.push_back("b"); });
  s.endBatch();
  s.synchronize();
  EXPECT_EQ(order, (std::vector<std::string>{"a", "marker", "b"}));
}

TEST(StreamBatchTest, AFailingStepNamesTheBatchAndStopsIt) {
  Stream s(0, 0, 0, nullptr);
  std::atomic<int> ran{0};
  s.beginBatch("compiled graph 3");
  s.enqueue("ok", [&] { ++ran; });
  s.enqueue("aten::bad", [] { throw std::runtime_error("boom"); });
  s.enqueue("later", [&] { ++ran; });
  s.endBatch();
  s.synchronize();
  auto err = s.takeError();
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->label, std::string("compiled graph 3"));
  EXPECT_NE(err->message.find("aten::bad (step 2 of compiled graph 3): boom"),
            std::string::npos)
      << err->message;
  EXPECT_EQ(ran.load(), 1);
  // Usable again, outside a batch and in a new one.
  s.beginBatch("again");
  s.enqueue("x", [&] { ++ran; });
  s.endBatch();
  s.synchronize();
  EXPECT_EQ(ran.load(), 2);
  EXPECT_FALSE(s.takeError().has_value());
}

TEST(StreamBatchTest, RuntimeErrorsKeepTheirStatus) {
  Stream s(0, 0, 0, nullptr);
  s.beginBatch("program");
  s.enqueue("a", [] {});
  s.enqueue("b", [] { throw Error(Status::kOutOfMemory, "no room"); });
  s.endBatch();
  s.synchronize();
  auto err = s.takeError();
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->status, Status::kOutOfMemory);
}

TEST(TraceTest, EnabledTraceRecordsItemsInOrder) {
  Trace trace;
  trace.enable(true);
  ASSERT_TRUE(trace.enabled());
  Stream s(2, 5, 0, &trace);
  const char* labels[] = {"matmul", "add", "relu", "copy_out"};
  for (const char* l : labels) s.enqueue(l, [] {});
  s.synchronize();

  std::vector<TraceRecord> recs = trace.drain();
  ASSERT_EQ(recs.size(), 4u);
  for (size_t i = 0; i < recs.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_STREQ(recs[i].label, labels[i]);
    EXPECT_EQ(recs[i].device, 2);
    EXPECT_EQ(recs[i].stream, 5);
    EXPECT_EQ(recs[i].seq, i + 1);
    EXPECT_FALSE(recs[i].skipped);
    EXPECT_GT(recs[i].start_ns, 0);
    EXPECT_LE(recs[i].start_ns, recs[i].end_ns);
    // One worker runs the items back to back.
    if (i > 0) EXPECT_LE(recs[i - 1].end_ns, recs[i].start_ns);
  }
  // drain() clears.
  EXPECT_TRUE(trace.drain().empty());
  EXPECT_EQ(trace.dropped(), 0u);
}

TEST(TraceTest, RecordsSkippedItems) {
  Trace trace;
  trace.enable(true);
  Stream s(0, 1, 0, &trace);
  s.enqueue("bad", [] { throw std::runtime_error("x"); });
  s.enqueue("skipped", [] {});
  s.enqueue("marker", [] {}, ItemKind::kMarker);
  s.synchronize();
  auto recs = trace.drain();
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_STREQ(recs[0].label, "bad");
  EXPECT_FALSE(recs[0].skipped);
  EXPECT_STREQ(recs[1].label, "skipped");
  EXPECT_TRUE(recs[1].skipped);
  EXPECT_STREQ(recs[2].label, "marker");
  EXPECT_FALSE(recs[2].skipped);
}

TEST(TraceTest, DisabledTraceRecordsNothing) {
  Trace trace;
  EXPECT_FALSE(trace.enabled());
  Stream s(0, 1, 0, &trace);
  s.enqueue("a", [] {});
  s.synchronize();
  EXPECT_TRUE(trace.drain().empty());

  trace.enable(true);
  s.enqueue("b", [] {});
  s.synchronize();
  trace.enable(false);
  s.enqueue("c", [] {});
  s.synchronize();
  auto recs = trace.drain();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_STREQ(recs[0].label, "b");
  EXPECT_EQ(recs[0].seq, 2u);
}

TEST(TraceTest, TwoStreamsShareATrace) {
  Trace trace;
  trace.enable(true);
  Stream a(0, 1, 0, &trace);
  Stream b(0, 2, 0, &trace);
  for (int i = 0; i < 50; ++i) {
    a.enqueue("a", [] {});
    b.enqueue("b", [] {});
  }
  a.synchronize();
  b.synchronize();
  auto recs = trace.drain();
  ASSERT_EQ(recs.size(), 100u);
  uint64_t next_seq[3] = {0, 1, 1};
  for (const auto& r : recs) {
    ASSERT_TRUE(r.stream == 1 || r.stream == 2);
    EXPECT_STREQ(r.label, r.stream == 1 ? "a" : "b");
    EXPECT_EQ(r.seq, next_seq[r.stream]++);  // per-stream order is kept
    EXPECT_LE(r.start_ns, r.end_ns);
  }
}

TEST(TraceTest, DropsRecordsBeyondTheLimit) {
  Trace trace;
  TraceRecord r{0, 0, 0, "x", 1, 2, false};
  for (size_t i = 0; i < Trace::kMaxRecords + 3; ++i) trace.add(r);
  EXPECT_EQ(trace.dropped(), 3u);
  EXPECT_EQ(trace.drain().size(), Trace::kMaxRecords);
  trace.add(r);  // room again after drain()
  EXPECT_EQ(trace.drain().size(), 1u);
}

TEST(TraceTest, NowIsMonotonic) {
  int64_t a = nowNs();
  int64_t b = nowNs();
  EXPECT_GT(a, 0);
  EXPECT_LE(a, b);
}

}  // namespace
}  // namespace neuron_rt
