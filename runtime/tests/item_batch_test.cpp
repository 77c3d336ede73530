// A stream's batch on its own: items held while it is open leave as one item
// that runs them in order, under the batch's label.
#include "neuron_runtime/item_batch.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "neuron_runtime/status.h"

namespace neuron_rt {
namespace {

WorkItem pushItem(std::vector<int>* ran, int v,
                  ItemKind kind = ItemKind::kCompute) {
  WorkItem item;
  item.label = "push";
  item.kind = kind;
  item.fn = [ran, v] { ran->push_back(v); };
  return item;
}

TEST(ItemBatchTest, HoldsNothingWhileClosed) {
  ItemBatch batch;
  std::vector<int> ran;
  WorkItem item = pushItem(&ran, 1);
  EXPECT_FALSE(batch.open());
  EXPECT_FALSE(batch.hold(item));
  EXPECT_TRUE(item.fn);  // still the caller's
  WorkItem out;
  EXPECT_FALSE(batch.take(&out));
  EXPECT_FALSE(batch.holdsItems());
}

TEST(ItemBatchTest, HeldItemsLeaveAsOneItemThatRunsThemInOrder) {
  ItemBatch batch;
  std::vector<int> ran;
  ItemNote note;
  note.correlation = 42;
  WorkItem flushed;
  EXPECT_FALSE(batch.begin("program", note, &flushed));
  EXPECT_TRUE(batch.open());
  for (int i = 0; i < 3; ++i) {
    WorkItem item = pushItem(&ran, i);
    ASSERT_TRUE(batch.hold(item));
    EXPECT_FALSE(item.fn);  // moved into the batch
  }
  EXPECT_TRUE(batch.holdsItems());
  WorkItem out;
  ASSERT_TRUE(batch.take(&out));
  EXPECT_STREQ(out.label, "program");
  EXPECT_EQ(out.kind, ItemKind::kCompute);
  EXPECT_EQ(out.note.correlation, 42u);
  ASSERT_TRUE(out.task);
  EXPECT_TRUE(ran.empty());  // held, not run
  out.task->run();
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2}));
  // Flushed early, the batch stays open: the next items are the same
  // program's, under the same label and note.
  EXPECT_TRUE(batch.open());
  WorkItem more = pushItem(&ran, 3);
  ASSERT_TRUE(batch.hold(more));
  WorkItem rest;
  ASSERT_TRUE(batch.end(&rest));
  EXPECT_FALSE(batch.open());
  EXPECT_STREQ(rest.label, "program");
  EXPECT_EQ(rest.note.correlation, 42u);
  rest.task->run();
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2, 3}));
}

TEST(ItemBatchTest, ANewBatchHandsBackWhatTheOpenOneHeld) {
  ItemBatch batch;
  std::vector<int> ran;
  WorkItem flushed;
  batch.begin("first", {}, &flushed);
  WorkItem item = pushItem(&ran, 1);
  batch.hold(item);
  ASSERT_TRUE(batch.begin("second", {}, &flushed));
  EXPECT_STREQ(flushed.label, "first");
  EXPECT_FALSE(batch.holdsItems());
  WorkItem next = pushItem(&ran, 2);
  batch.hold(next);
  WorkItem out;
  ASSERT_TRUE(batch.end(&out));
  EXPECT_STREQ(out.label, "second");
  WorkItem none;
  EXPECT_FALSE(batch.end(&none));  // nothing held: nothing handed back
}

TEST(ItemBatchTest, AFailingStepNamesTheBatchAndStopsIt) {
  ItemBatch batch;
  std::vector<int> ran;
  WorkItem flushed;
  batch.begin("program", {}, &flushed);
  WorkItem ok = pushItem(&ran, 1);
  batch.hold(ok);
  WorkItem bad;
  bad.label = "bad_op";
  bad.task = nullptr;
  bad.fn = [] { throw Error(Status::kOutOfMemory, "no room"); };
  batch.hold(bad);
  WorkItem after = pushItem(&ran, 3);
  batch.hold(after);
  WorkItem out;
  ASSERT_TRUE(batch.end(&out));
  try {
    out.task->run();
    FAIL() << "did not throw";
  } catch (const StepError& e) {
    EXPECT_EQ(e.status(), Status::kOutOfMemory);
    EXPECT_EQ(std::string(e.what()), "bad_op (step 2 of program): no room");
    // The step, as fields (the torch layer's DeviceError reads them).
    EXPECT_EQ(e.step(), "bad_op");
    EXPECT_EQ(e.index(), 2);
    EXPECT_EQ(e.stepMessage(), "no room");
  }
  EXPECT_EQ(ran, (std::vector<int>{1}));
}

TEST(ItemBatchTest, ConcurrentHoldersLoseNothing) {
  ItemBatch batch;
  WorkItem flushed;
  batch.begin("program", {}, &flushed);
  std::atomic<int> runs{0};
  auto produce = [&] {
    for (int i = 0; i < 1000; ++i) {
      WorkItem item;
      item.label = "inc";
      item.fn = [&runs] { ++runs; };
      ASSERT_TRUE(batch.hold(item));
    }
  };
  std::thread a(produce), b(produce);
  a.join();
  b.join();
  WorkItem out;
  ASSERT_TRUE(batch.end(&out));
  out.task->run();
  EXPECT_EQ(runs.load(), 2000);
}

}  // namespace
}  // namespace neuron_rt
