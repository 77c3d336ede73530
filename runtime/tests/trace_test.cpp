// The profiler's view of work items: the host's notes travel with the items,
// batches and replays record their steps as children (the Trainium
// estimate's rules: trainium_estimate_test.cpp).
#include "neuron_runtime/trace.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "neuron_runtime/captured_work.h"
#include "neuron_runtime/stream.h"

using namespace neuron_rt;

TEST(TraceNotes, ItemCarriesTheHostsNoteAndCorrelation) {
  Trace trace;
  trace.enable(true);
  Stream s(0, 0, 0, &trace);
  pushCorrelation(42);
  ItemNote& n = pendingNote();
  n.set = true;
  n.flops = 1000;
  n.bytes = 64;
  n.tensor_engine = true;
  n.detail = std::make_shared<const std::string>("op=x;size=64");
  s.enqueue("noted", [] {});
  s.enqueue("plain", [] {});  // the note was taken by the first item
  popCorrelation();
  s.enqueue("outside", [] {});
  s.enqueue(
      "copy", [] {}, ItemKind::kCopy);
  s.enqueue(
      "event", [] {}, ItemKind::kMarker);
  s.synchronize();
  auto recs = trace.drain();
  ASSERT_EQ(recs.size(), 5u);
  EXPECT_EQ(recs[0].note.correlation, 42u);
  EXPECT_TRUE(recs[0].note.set);
  EXPECT_EQ(recs[0].note.flops, 1000);
  EXPECT_EQ(recs[0].note.bytes, 64);
  EXPECT_TRUE(recs[0].note.tensor_engine);
  ASSERT_TRUE(recs[0].note.detail);
  EXPECT_EQ(*recs[0].note.detail, "op=x;size=64");
  EXPECT_GT(recs[0].note.queued_ns, 0);
  EXPECT_LE(recs[0].note.queued_ns, recs[0].start_ns);
  EXPECT_NE(recs[0].note.host_thread, 0);
  EXPECT_EQ(recs[1].note.correlation, 42u);
  EXPECT_FALSE(recs[1].note.set);
  EXPECT_EQ(recs[1].note.flops, 0);
  EXPECT_EQ(recs[2].note.correlation, 0u);
  EXPECT_EQ(recs[3].note.category, ItemCategory::kCopy);
  EXPECT_EQ(recs[4].note.category, ItemCategory::kMarker);
  for (const auto& r : recs) EXPECT_EQ(r.parent_seq, 0u);
}

TEST(TraceNotes, UntracedStreamLeavesTheNotePending) {
  Trace trace;  // disabled
  Stream s(0, 0, 0, &trace);
  pendingNote() = ItemNote{};
  pendingNote().flops = 7;
  s.enqueue("x", [] {});
  s.synchronize();
  EXPECT_TRUE(trace.drain().empty());
  EXPECT_EQ(pendingNote().flops, 7);  // nothing read it
  pendingNote() = ItemNote{};
}

TEST(TraceNotes, BatchStepsAreChildrenOfTheProgram) {
  Trace trace;
  trace.enable(true);
  Stream s(1, 2, 0, &trace);
  pendingNote().set = false;
  pendingNote().category = ItemCategory::kProgram;
  s.beginBatch("program");
  for (int i = 0; i < 3; ++i) {
    pendingNote().set = true;
    pendingNote().flops = 10.0 * (i + 1);
    s.enqueue("step", [] {});
  }
  s.endBatch();
  s.synchronize();
  auto recs = trace.drain();
  ASSERT_EQ(recs.size(), 4u);
  // Children are recorded while their item runs: before it.
  const TraceRecord& item = recs.back();
  EXPECT_STREQ(item.label, "program");
  EXPECT_EQ(item.parent_seq, 0u);
  EXPECT_EQ(item.note.category, ItemCategory::kProgram);
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    EXPECT_STREQ(recs[i].label, "step");
    EXPECT_EQ(recs[i].parent_seq, item.seq);
    EXPECT_EQ(recs[i].child_index, i);
    EXPECT_EQ(recs[i].note.flops, 10.0 * (i + 1));
    EXPECT_GE(recs[i].start_ns, item.start_ns);
    EXPECT_LE(recs[i].end_ns, item.end_ns);
  }
}

TEST(TraceNotes, RunningItemEstimateAndEngineChildren) {
  Trace trace;
  trace.enable(true);
  Stream s(0, 0, 0, &trace);
  s.enqueue("kernel", [] {
    ASSERT_TRUE(tracingRunningItem());
    setRunningItemEstimate(1234);
    ItemNote engine;
    engine.set = true;
    engine.category = ItemCategory::kEngine;
    engine.estimate_ns = 1000;
    const int64_t t = nowNs();
    traceChild("Vector", t, t, engine);
  });
  s.synchronize();
  auto recs = trace.drain();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_STREQ(recs[0].label, "Vector");
  EXPECT_EQ(recs[0].note.category, ItemCategory::kEngine);
  EXPECT_EQ(recs[0].parent_seq, recs[1].seq);
  EXPECT_EQ(recs[1].note.estimate_ns, 1234);
  EXPECT_FALSE(tracingRunningItem());  // only on a worker, while it runs
}

TEST(TraceNotes, EstimatePartsTravelAsFields) {
  Trace trace;
  trace.enable(true);
  Stream s(0, 0, 0, &trace);
  ItemNote& n = pendingNote();
  n.set = true;
  n.parts = EstimateParts{100, 50, 20, 30};
  n.has_parts = true;
  n.estimate_ns = 140;
  s.enqueue("with parts", [] {});
  // A cost model's total replaces the host's estimate: no parts then.
  ItemNote& k = pendingNote();
  k.set = true;
  k.parts = EstimateParts{1, 1, 1, 0};
  k.has_parts = true;
  s.enqueue("kernel", [] { setRunningItemEstimate(999); });
  s.synchronize();
  auto recs = trace.drain();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_TRUE(recs[0].note.has_parts);
  EXPECT_DOUBLE_EQ(recs[0].note.parts.compute_ns, 100);
  EXPECT_DOUBLE_EQ(recs[0].note.parts.overlap_ns, 30);
  EXPECT_DOUBLE_EQ(recs[0].note.parts.totalNs(), 140);
  EXPECT_EQ(recs[1].note.estimate_ns, 999);
  EXPECT_FALSE(recs[1].note.has_parts);
}
