// The profiler's view of work items: the host's notes travel with the items,
// batches and replays record their steps as children, and the Trainium
// estimate's arithmetic.
#include "neuron_runtime/trace.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "neuron_runtime/captured_work.h"
#include "neuron_runtime/stream.h"
#include "neuron_runtime/trainium_estimate.h"

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
  s.enqueue("copy", [] {}, ItemKind::kCopy);
  s.enqueue("event", [] {}, ItemKind::kMarker);
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

TEST(TrainiumEstimate, RooflineTakesTheLongerSidePlusLatency) {
  const TrainiumModel& m = trainiumModel(Target::kTrn2);
  // Memory-bound: 1 MB of traffic, few flops.
  const double bytes = 1 << 20;
  EXPECT_EQ(rooflineNs(1, bytes, false, 4, m),
            static_cast<int64_t>(
                std::llround(bytes / m.hbm_bytes_per_ns + m.fixed_ns)));
  // Compute-bound matmul: bf16 at the tensor engine's peak, fp32 slower.
  const double flops = 2.0 * 4096 * 4096 * 4096;
  const int64_t bf16 = rooflineNs(flops, 1, true, 2, m);
  const int64_t fp32 = rooflineNs(flops, 1, true, 4, m);
  EXPECT_NEAR(bf16, flops / m.tensor_bf16_flops_per_ns + m.fixed_ns, 1);
  EXPECT_GT(fp32, bf16);
  // A logical core of two NeuronCore-v3 has twice the engines; trn1 has no
  // logical cores.
  const TrainiumModel lnc2 = logicalCoreModel(m, 2);
  EXPECT_NEAR(rooflineNs(flops, 1, true, 2, lnc2) - m.fixed_ns,
              (bf16 - m.fixed_ns) / 2.0, 1);
  const TrainiumModel& trn1 = trainiumModel(Target::kTrn1);
  EXPECT_EQ(logicalCoreModel(trn1, 2).tensor_bf16_flops_per_ns,
            trn1.tensor_bf16_flops_per_ns);
}

TEST(TrainiumEstimate, CollectivesGrowWithRanksAndBytes) {
  const TrainiumModel& m = trainiumModel(Target::kTrn2);
  EXPECT_EQ(collectiveNs(CollectiveShape::kAllReduce, 1 << 20, 1, m),
            static_cast<int64_t>(m.fixed_ns));  // one rank: nothing to send
  const int64_t two = collectiveNs(CollectiveShape::kAllReduce, 1 << 20, 2, m);
  const int64_t eight =
      collectiveNs(CollectiveShape::kAllReduce, 1 << 20, 8, m);
  EXPECT_GT(eight, two);
  EXPECT_GT(collectiveNs(CollectiveShape::kAllReduce, 1 << 24, 8, m), eight);
  // A ring all-reduce sends twice what an all-gather of the same size does.
  EXPECT_GT(collectiveNs(CollectiveShape::kAllReduce, 1 << 24, 8, m),
            collectiveNs(CollectiveShape::kAllGather, 1 << 24, 8, m));
}

TEST(TrainiumEstimate, TargetSelection) {
  const Target before = trainiumModel().target;
  setTrainiumTarget(Target::kTrn1);
  EXPECT_EQ(trainiumModel().target, Target::kTrn1);
  EXPECT_EQ(trainiumModel().name, "trn1");
  setTrainiumTarget(Target::kTrn3);
  EXPECT_EQ(trainiumModel().name, "trn3");
  setTrainiumTarget(before);
}
