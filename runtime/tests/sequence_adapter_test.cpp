// Adaptive eager's first stage: a repeated window of signed items runs as one
// item from its third occurrence, always in the order the host queued it.
#include "neuron_runtime/sequence_adapter.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "neuron_runtime/captured_work.h"
#include "neuron_runtime/stream.h"
#include "neuron_runtime/trace.h"
#include "test_util.h"

using namespace neuron_rt;
using neuron_rt_test::AdaptiveOn;

namespace {

// Queues the window `ops` (signed items appending their name to `ran`).
void queueWindow(Stream& s, const std::vector<const char*>& ops,
                 std::vector<std::string>* ran) {
  for (const char* op : ops) {
    signNextItem(std::hash<std::string>()(op) | 1);
    s.enqueue(op, [op, ran] { ran->push_back(op); });
  }
}

std::vector<std::string> labels(Trace& trace) {
  std::vector<std::string> out;
  for (const auto& r : trace.drain())
    if (!r.parent_seq) out.push_back(r.label);
  return out;
}

}  // namespace

TEST(SequenceAdapter, ThirdOccurrenceRunsAsOneItem) {
  AdaptiveOn on;
  Trace trace;
  trace.enable(true);
  Stream s(0, 0, 0, &trace);
  std::vector<std::string> ran;
  const std::vector<const char*> step = {"mm", "add", "relu"};
  for (int i = 0; i < 4; ++i) {
    queueWindow(s, step, &ran);
    s.synchronize();
  }
  EXPECT_EQ(ran.size(), 12u);
  for (size_t i = 0; i < ran.size(); ++i) EXPECT_EQ(ran[i], step[i % 3]);
  const std::vector<std::string> got = labels(trace);
  const std::vector<std::string> want = {"mm",
                                         "add",
                                         "relu",
                                         "mm",
                                         "add",
                                         "relu",
                                         "adaptive mm .. relu",
                                         "adaptive mm .. relu"};
  EXPECT_EQ(got, want);
  EXPECT_EQ(adaptiveStats().adapted.load(), 1u);
  EXPECT_EQ(adaptiveStats().replays.load(), 2u);
  EXPECT_EQ(adaptiveStats().items_held.load(), 6u);
  EXPECT_EQ(adaptiveStats().deviations.load(), 0u);
}

TEST(SequenceAdapter, DeviationRunsWhatWasHeldFirstInOrder) {
  AdaptiveOn on;
  Trace trace;
  trace.enable(true);
  Stream s(0, 0, 0, &trace);
  std::vector<std::string> ran;
  for (int i = 0; i < 2; ++i) {
    queueWindow(s, {"a", "b", "c"}, &ran);
    s.synchronize();
  }
  ran.clear();
  (void)trace.drain();
  queueWindow(s, {"a", "b", "x", "c"}, &ran);  // deviates at "x"
  s.synchronize();
  EXPECT_EQ(ran, (std::vector<std::string>{"a", "b", "x", "c"}));
  EXPECT_EQ(labels(trace),
            (std::vector<std::string>{"adaptive a .. b", "x", "c"}));
  EXPECT_EQ(adaptiveStats().deviations.load(), 1u);
}

TEST(SequenceAdapter, BoundariesRunWhatIsHeld) {
  AdaptiveOn on;
  Trace trace;
  trace.enable(true);
  Stream s(0, 0, 0, &trace);
  std::vector<std::string> ran;
  for (int i = 0; i < 2; ++i) {
    queueWindow(s, {"a", "b", "c"}, &ran);
    s.synchronize();
  }
  ran.clear();
  queueWindow(s, {"a", "b"}, &ran);
  s.enqueue(
      "event", [] {}, ItemKind::kMarker);  // a boundary
  s.synchronize();
  EXPECT_EQ(ran, (std::vector<std::string>{"a", "b"}));
  // A poll runs held items too (they would never run otherwise).
  queueWindow(s, {"a", "b"}, &ran);
  while (!s.query()) {
  }
  EXPECT_EQ(ran, (std::vector<std::string>{"a", "b", "a", "b"}));
  // An unsigned item (a collective, a program) is a boundary.
  queueWindow(s, {"a"}, &ran);
  s.enqueue("unsigned", [&ran] { ran.push_back("unsigned"); });
  s.synchronize();
  EXPECT_EQ(ran.back(), "unsigned");
  EXPECT_EQ(ran[ran.size() - 2], "a");
}

TEST(SequenceAdapter, SwitchedOffWhileHoldingKeepsOrder) {
  AdaptiveOn on;
  Stream s(0, 0, 0, nullptr);
  std::vector<std::string> ran;
  for (int i = 0; i < 2; ++i) {
    queueWindow(s, {"a", "b", "c"}, &ran);
    s.synchronize();
  }
  ran.clear();
  queueWindow(s, {"a", "b"}, &ran);  // held
  adaptiveSettings().enabled = false;
  s.enqueue("plain", [&ran] { ran.push_back("plain"); });
  s.synchronize();
  EXPECT_EQ(ran, (std::vector<std::string>{"a", "b", "plain"}));
}

TEST(SequenceAdapter, GivesUpWhenNothingRepeats) {
  AdaptiveOn on;
  adaptiveSettings().max_fruitless_windows = 5;
  Stream s(0, 0, 0, nullptr);
  std::vector<std::string> ran;
  static const char* names[] = {"w0", "w1", "w2", "w3", "w4", "w5", "w6"};
  for (const char* n : names) {
    queueWindow(s, {n}, &ran);
    s.synchronize();
  }
  EXPECT_EQ(adaptiveStats().streams_given_up.load(), 1u);
  // Repeats after giving up are not adapted.
  for (int i = 0; i < 3; ++i) {
    queueWindow(s, {"a", "b"}, &ran);
    s.synchronize();
  }
  EXPECT_EQ(adaptiveStats().adapted.load(), 0u);
  EXPECT_EQ(ran.size(), 7u + 6u);
}

TEST(SequenceAdapter, LeastRecentlyUsedSequencesAreEvicted) {
  AdaptiveOn on;
  adaptiveSettings().max_sequences = 2;
  Stream s(0, 0, 0, nullptr);
  std::vector<std::string> ran;
  static const char* firsts[] = {"p", "q", "r"};
  for (const char* f : firsts)
    for (int i = 0; i < 2; ++i) {
      queueWindow(s, {f, "tail"}, &ran);
      s.synchronize();
    }
  EXPECT_EQ(adaptiveStats().adapted.load(), 3u);
  EXPECT_EQ(adaptiveStats().evictions.load(), 1u);
  adaptiveSettings().max_sequences = 16;
}

TEST(SequenceAdapter, PeriodsAreFoundWithoutSynchronizing) {
  AdaptiveOn on;
  Trace trace;
  trace.enable(true);
  Stream s(0, 0, 0, &trace);
  std::vector<std::string> ran;
  const std::vector<const char*> step = {"s0", "s1", "s2", "s3", "s4",
                                         "s5", "s6", "s7", "s8", "s9"};
  for (int i = 0; i < 5; ++i) queueWindow(s, step, &ran);  // no sync between
  s.synchronize();
  ASSERT_EQ(ran.size(), 50u);
  for (size_t i = 0; i < ran.size(); ++i) EXPECT_EQ(ran[i], step[i % 10]);
  EXPECT_EQ(adaptiveStats().adapted.load(), 1u);
  EXPECT_EQ(adaptiveStats().replays.load(), 3u);
  const std::vector<std::string> got = labels(trace);
  ASSERT_EQ(got.size(), 20u + 3u);
  EXPECT_EQ(got.back(), "adaptive s0 .. s9");
}

TEST(SequenceAdapter, ShortLoopsAreNotPeriods) {
  AdaptiveOn on;
  Stream s(0, 0, 0, nullptr);
  std::vector<std::string> ran;
  for (int i = 0; i < 50; ++i) queueWindow(s, {"add_", "mul_"}, &ran);
  s.synchronize();
  EXPECT_EQ(adaptiveStats().adapted.load(), 0u);
  EXPECT_EQ(ran.size(), 100u);
}

TEST(SequenceAdapter, GivesUpWhenAdaptedSequencesKeepDeviating) {
  AdaptiveOn on;
  adaptiveSettings().max_deviations = 3;
  Stream s(0, 0, 0, nullptr);
  std::vector<std::string> ran;
  for (int i = 0; i < 2; ++i) {
    queueWindow(s, {"a", "b", "c"}, &ran);
    s.synchronize();
  }
  static const char* others[] = {"x0", "x1", "x2", "x3", "x4"};
  for (const char* x : others) {
    queueWindow(s, {"a", x}, &ran);  // starts like the sequence, deviates
    s.synchronize();
  }
  EXPECT_EQ(adaptiveStats().deviations.load(), 3u);
  EXPECT_EQ(adaptiveStats().streams_given_up.load(), 1u);
  EXPECT_EQ(ran.size(), 6u + 10u);
  adaptiveSettings().max_deviations = 16;
}

TEST(SequenceAdapter, LongSequencesRunInParts) {
  AdaptiveOn on;
  adaptiveSettings().chunk_items = 8;
  Trace trace;
  trace.enable(true);
  Stream s(0, 0, 0, &trace);
  std::vector<std::string> ran;
  static const char* names[] = {"o0",  "o1",  "o2",  "o3",  "o4",  "o5",  "o6",
                                "o7",  "o8",  "o9",  "o10", "o11", "o12", "o13",
                                "o14", "o15", "o16", "o17", "o18", "o19"};
  const std::vector<const char*> step(std::begin(names), std::end(names));
  for (int i = 0; i < 3; ++i) {
    queueWindow(s, step, &ran);
    s.synchronize();
  }
  ASSERT_EQ(ran.size(), 60u);
  for (size_t i = 0; i < ran.size(); ++i) EXPECT_EQ(ran[i], step[i % 20]);
  std::vector<std::string> got = labels(trace);
  got.erase(got.begin(), got.begin() + 40);
  EXPECT_EQ(got,
            (std::vector<std::string>{"adaptive o0 .. o7", "adaptive o8 .. o15",
                                      "adaptive o16 .. o19"}));
  EXPECT_EQ(adaptiveStats().replays.load(), 1u);
  EXPECT_EQ(adaptiveStats().items_held.load(), 20u);
}

TEST(SequenceAdapter, HeldItemsAreNotCapturedByALaterCapture) {
  AdaptiveOn on;
  Stream s(0, 0, 0, nullptr);
  std::vector<std::string> ran;
  for (int i = 0; i < 2; ++i) {
    queueWindow(s, {"a", "b", "c"}, &ran);
    s.synchronize();
  }
  ran.clear();
  queueWindow(s, {"a", "b"}, &ran);  // held
  s.beginCapture(7);
  s.enqueue("captured", [&ran] { ran.push_back("captured"); });
  auto work = s.endCapture();
  s.synchronize();
  EXPECT_EQ(ran, (std::vector<std::string>{"a", "b"}));  // ran, not captured
  EXPECT_EQ(work->size(), 1u);
  s.replay(work, "graph");
  s.synchronize();
  EXPECT_EQ(ran.back(), "captured");
}
