// Stream capture and replay (the runtime half of torch.neuron graphs).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "neuron_runtime/captured_work.h"
#include "neuron_runtime/status.h"
#include "neuron_runtime/stream.h"

namespace neuron_rt {
namespace {

class CountingTask final : public Task {
 public:
  explicit CountingTask(std::atomic<int>* n) : n_(n) {}
  void run() override { ++*n_; }

 private:
  std::atomic<int>* n_;
};

TEST(StreamCaptureTest, CapturedItemsDoNotRunUntilReplayed) {
  Stream s(0, 0, 0, nullptr);
  std::vector<int> order;
  s.enqueue("before", [&] { order.push_back(0); });
  s.synchronize();
  s.beginCapture(7);
  EXPECT_TRUE(s.capturing());
  EXPECT_EQ(s.captureId(), 7u);
  s.enqueue("a", [&] { order.push_back(1); });
  s.enqueue("b", [&] { order.push_back(2); });
  EXPECT_EQ(s.lastEnqueued(), 1u);  // recorded, not queued
  auto work = s.endCapture();
  EXPECT_FALSE(s.capturing());
  ASSERT_EQ(work->size(), 2u);
  EXPECT_EQ(work->id(), 7u);
  EXPECT_STREQ(work->stepLabel(1), "b");
  s.synchronize();
  EXPECT_EQ(order, (std::vector<int>{0}));
  for (int i = 0; i < 3; ++i) s.replay(work, "graph");
  s.synchronize();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 1, 2, 1, 2}));
  EXPECT_EQ(s.lastEnqueued(), 4u);  // each replay is one item
}

TEST(StreamCaptureTest, TasksAndBatchesAreCapturedAndRunEachReplay) {
  Stream s(0, 0, 0, nullptr);
  std::atomic<int> n{0};
  s.beginCapture(1);
  s.enqueue("task", std::make_unique<CountingTask>(&n));
  s.beginBatch("program");
  s.enqueue("step", [&] { n += 10; });
  s.enqueue("step", [&] { n += 100; });
  s.endBatch();
  auto work = s.endCapture();
  EXPECT_EQ(work->size(), 2u);  // the task, the program
  s.replay(work, "graph");
  s.replay(work, "graph");
  s.synchronize();
  EXPECT_EQ(n.load(), 222);
}

TEST(StreamCaptureTest, HostWaitsAndMarkersInvalidateTheCapture) {
  Stream s(0, 0, 0, nullptr);
  s.beginCapture(1);
  s.enqueue("a", [] {});
  try {
    s.synchronize();
    FAIL() << "synchronize while capturing";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kCaptureInvalid);
    EXPECT_NE(std::string(e.what()).find("not permitted"), std::string::npos);
  }
  EXPECT_THROW(s.enqueue("record", [] {}, ItemKind::kMarker), Error);
  try {
    s.endCapture();
    FAIL() << "an invalidated capture ends with an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kCaptureInvalid);
    EXPECT_NE(std::string(e.what()).find("a stream synchronize"),
              std::string::npos)
        << e.what();
  }
  // The stream is usable again.
  std::atomic<int> ran{0};
  s.enqueue("after", [&] { ++ran; });
  s.synchronize();
  EXPECT_EQ(ran.load(), 1);
}

TEST(StreamCaptureTest, CapturesDoNotNestAndEndNeedsABegin) {
  Stream s(0, 0, 0, nullptr);
  EXPECT_THROW(s.endCapture(), Error);
  EXPECT_THROW(s.beginCapture(0), Error);
  s.beginCapture(1);
  EXPECT_THROW(s.beginCapture(2), Error);
  EXPECT_EQ(s.captureId(), 1u);
  s.endCapture();
}

TEST(StreamCaptureTest, AFailingStepNamesItselfAndTheGraph) {
  Stream s(0, 0, 0, nullptr);
  s.beginCapture(1);
  s.enqueue("ok", [] {});
  s.enqueue("bad_op", [] { throw std::runtime_error("boom"); });
  auto work = s.endCapture();
  s.replay(work, "graph 3");
  s.synchronize();
  auto err = s.takeError();
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->label, "graph 3");
  EXPECT_EQ(err->message, "bad_op (step 2 of graph 3): boom");
}

}  // namespace
}  // namespace neuron_rt
