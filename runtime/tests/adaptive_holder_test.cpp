// Adaptive eager's holding on its own (no stream): what the holder keeps
// while a repeated sequence is matched, and what it lets go to the sink.
#include "neuron_runtime/adaptive_holder.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"

using neuron_rt_test::AdaptiveOn;

namespace neuron_rt {
namespace {

// Records what leaves the holder, and runs it (so order can be checked).
class RecordingSink final : public ItemSink {
 public:
  bool traced = false;
  std::vector<std::string> labels;
  std::vector<WorkItem> items;
  bool tracing() const override { return traced; }
  void put(WorkItem&& item) override {
    labels.push_back(item.label);
    items.push_back(std::move(item));
  }
  void runAll() {
    for (WorkItem& item : items) item.task ? item.task->run() : item.fn();
    items.clear();
  }
};

// The item the host queues for op `name`, signed, appending to `ran`.
WorkItem op(const char* name, std::vector<std::string>* ran) {
  WorkItem item;
  item.label = name;
  item.fn = [name, ran] { ran->push_back(name); };
  return item;
}
uint64_t sig(const char* name) { return std::hash<std::string>()(name) | 1; }

// Offers the window `ops`; items the holder did not take go to the sink too
// (as a stream would queue them).
void window(AdaptiveHolder& h, RecordingSink& sink,
            const std::vector<const char*>& ops,
            std::vector<std::string>* ran) {
  for (const char* name : ops) {
    WorkItem item = op(name, ran);
    if (!h.offer(item, sig(name), false, sink)) sink.put(std::move(item));
  }
}

TEST(AdaptiveHolderTest, EngagedOnlyWhileTheModeIsOnOrItemsAreHeld) {
  AdaptiveHolder h;
  EXPECT_FALSE(h.engaged());
  AdaptiveOn on;
  EXPECT_TRUE(h.engaged());
  EXPECT_FALSE(h.holding());
}

TEST(AdaptiveHolderTest, ARepeatedWindowLeavesAsOneItemInOrder) {
  AdaptiveOn on;
  AdaptiveHolder h;
  RecordingSink sink;
  std::vector<std::string> ran;
  const std::vector<const char*> step = {"mm", "add", "relu"};
  for (int i = 0; i < 2; ++i) {
    window(h, sink, step, &ran);
    h.boundary(sink);
  }
  EXPECT_EQ(sink.labels.size(), 6u);  // learning: each item plainly
  sink.labels.clear();
  sink.runAll();
  ran.clear();
  // The third occurrence is held until complete, then leaves as one item.
  WorkItem first = op("mm", &ran);
  EXPECT_TRUE(h.offer(first, sig("mm"), false, sink));
  EXPECT_TRUE(h.holding());
  EXPECT_TRUE(sink.labels.empty());
  window(h, sink, {"add", "relu"}, &ran);
  EXPECT_FALSE(h.holding());
  EXPECT_EQ(sink.labels, (std::vector<std::string>{"adaptive mm .. relu"}));
  sink.runAll();
  EXPECT_EQ(ran, (std::vector<std::string>{"mm", "add", "relu"}));
}

TEST(AdaptiveHolderTest, BoundariesAndDeviationsLetHeldItemsGoFirst) {
  AdaptiveOn on;
  AdaptiveHolder h;
  RecordingSink sink;
  std::vector<std::string> ran;
  for (int i = 0; i < 2; ++i) {
    window(h, sink, {"a", "b", "c"}, &ran);
    h.boundary(sink);
  }
  sink.labels.clear();
  sink.runAll();
  ran.clear();
  // A deviation: what was held goes first, the deviating item is the
  // caller's.
  window(h, sink, {"a", "b", "x"}, &ran);
  EXPECT_EQ(sink.labels, (std::vector<std::string>{"adaptive a .. b", "x"}));
  h.boundary(sink);
  // A boundary item (a marker): what is held goes first.
  sink.labels.clear();
  window(h, sink, {"a"}, &ran);
  EXPECT_TRUE(h.holding());
  WorkItem marker = op("event", &ran);
  marker.kind = ItemKind::kMarker;
  EXPECT_FALSE(h.offer(marker, 0, true, sink));
  EXPECT_EQ(sink.labels, (std::vector<std::string>{"a"}));  // alone: itself
  // A poll with items held is a boundary; without, nothing happens.
  window(h, sink, {"a", "b"}, &ran);
  EXPECT_TRUE(h.boundaryIfHolding(sink));
  EXPECT_FALSE(h.boundaryIfHolding(sink));
  EXPECT_EQ(sink.labels.back(), "adaptive a .. b");
  // release() lets held items go (a stream's end).
  h.boundary(sink);
  window(h, sink, {"a", "b"}, &ran);
  EXPECT_TRUE(h.holding());
  h.release(sink);
  EXPECT_FALSE(h.holding());
  sink.runAll();
  EXPECT_EQ(ran,
            (std::vector<std::string>{"a", "b", "x", "a", "a", "b", "a", "b"}));
}

TEST(AdaptiveHolderTest, TheCombinedItemIsDescribedWhileTracing) {
  AdaptiveOn on;
  AdaptiveHolder h;
  RecordingSink sink;
  sink.traced = true;
  std::vector<std::string> ran;
  for (int i = 0; i < 3; ++i) {
    window(h, sink, {"a", "b"}, &ran);
    h.boundary(sink);
  }
  const ItemNote& note = sink.items.back().note;
  ASSERT_EQ(note.category, ItemCategory::kProgram);
  // The sequence it replays, as a field: the same one each window.
  EXPECT_NE(note.adaptive_sequence, 0u);
  EXPECT_FALSE(note.detail);
  const uint64_t first = note.adaptive_sequence;
  window(h, sink, {"a", "b"}, &ran);
  h.boundary(sink);
  EXPECT_EQ(sink.items.back().note.adaptive_sequence, first);
}

TEST(AdaptiveHolderTest, IdentityIsZeroOnlyForUnsignedItems) {
  const char* label = "add";
  EXPECT_EQ(AdaptiveHolder::identity(label, ItemKind::kCompute, 0), 0u);
  EXPECT_NE(AdaptiveHolder::identity(label, ItemKind::kCompute, 5),
            AdaptiveHolder::identity(label, ItemKind::kCopy, 5));
  EXPECT_NE(AdaptiveHolder::identity(label, ItemKind::kCompute, 5),
            AdaptiveHolder::identity(label, ItemKind::kCompute, 6));
}

}  // namespace
}  // namespace neuron_rt
