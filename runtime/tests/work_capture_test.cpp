// A stream's capture on its own: items recorded while capturing, handed over
// at the end; a forbidden call invalidates the capture.
#include "neuron_runtime/work_capture.h"

#include <gtest/gtest.h>

#include <vector>

#include "neuron_runtime/status.h"
#include "test_util.h"

namespace neuron_rt {
namespace {

using neuron_rt_test::ThrowsError;

TEST(WorkCaptureTest, RecordsNothingWhileInactive) {
  WorkCapture capture;
  EXPECT_FALSE(capture.active());
  EXPECT_EQ(capture.id(), 0u);
  WorkFn fn = [] {};
  TaskPtr task;
  EXPECT_FALSE(capture.record("op", fn, task, nullptr));
  EXPECT_TRUE(fn);      // still the caller's
  capture.reject("x");  // not capturing: nothing to reject
  EXPECT_TRUE(ThrowsError([&] { capture.end(); }, Status::kCaptureInvalid,
                          {"not capturing"}));
}

TEST(WorkCaptureTest, RecordedItemsAreHandedOverInOrder) {
  WorkCapture capture;
  std::vector<int> ran;
  capture.begin(9);
  EXPECT_TRUE(capture.active());
  EXPECT_EQ(capture.id(), 9u);
  for (int i = 0; i < 3; ++i) {
    WorkFn fn = [&ran, i] { ran.push_back(i); };
    TaskPtr task;
    ItemNote note;
    note.correlation = 100 + i;
    ASSERT_TRUE(capture.record(i == 1 ? "b" : "a", fn, task, &note));
    EXPECT_FALSE(fn);  // moved into the capture
  }
  auto work = capture.end();
  EXPECT_FALSE(capture.active());
  ASSERT_EQ(work->size(), 3u);
  EXPECT_EQ(work->id(), 9u);
  EXPECT_STREQ(work->stepLabel(1), "b");
  EXPECT_TRUE(ran.empty());
  work->run("graph");
  work->run("graph");  // re-runnable
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2, 0, 1, 2}));
}

TEST(WorkCaptureTest, BadIdsAndNestingAreRefused) {
  WorkCapture capture;
  EXPECT_TRUE(ThrowsError([&] { capture.begin(0); }, Status::kInvalidArgument,
                          {"capture id"}));
  capture.begin(1);
  EXPECT_TRUE(ThrowsError([&] { capture.begin(2); }, Status::kCaptureInvalid,
                          {"do not nest"}));
  EXPECT_EQ(capture.id(), 1u);  // the first capture goes on
  EXPECT_EQ(capture.end()->id(), 1u);
}

TEST(WorkCaptureTest, ARejectedCallInvalidatesTheCaptureNamingTheFirst) {
  WorkCapture capture;
  capture.begin(3);
  EXPECT_TRUE(ThrowsError([&] { capture.reject("record_event"); },
                          Status::kCaptureInvalid,
                          {"record_event", "not permitted"}));
  EXPECT_TRUE(ThrowsError([&] { capture.reject("a stream synchronize"); },
                          Status::kCaptureInvalid));
  EXPECT_TRUE(capture.active());  // until end()
  EXPECT_TRUE(ThrowsError([&] { capture.end(); }, Status::kCaptureInvalid,
                          {"invalidated: record_event"}));
  EXPECT_FALSE(capture.active());
  // A new capture starts valid.
  capture.begin(4);
  EXPECT_EQ(capture.end()->size(), 0u);
}

}  // namespace
}  // namespace neuron_rt
