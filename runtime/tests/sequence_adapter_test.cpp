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

TEST(SequenceAdapter, PartsDoNotEndInsideAForeachRun) {
  // ops: a b [c x4] [d x4] [e x4] f g h ...: blocks of one op, and three
  // blocks of 4 in a row (a foreach run of 3 ops over 4 tensors).
  std::vector<uint64_t> ops = {1, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5};
  for (uint64_t k = 6; k < 40; ++k) ops.push_back(k);
  // Every 4 items: the first end would be inside the run (after item 4);
  // it moves to the run's end (14), then every 4 again.
  const std::vector<uint8_t> large(ops.size(), 1);
  EXPECT_EQ(partEnds(ops.data(), large.data(), ops.size(), 4),
            (std::vector<uint32_t>{14, 18, 22, 26, 30, 34, 38, 42, 46}));
  // Blocks of different lengths may be split between them.
  std::vector<uint64_t> uneven = {1, 1, 1, 2, 2, 3, 3, 3, 3, 4, 5, 6};
  EXPECT_EQ(partEnds(uneven.data(), large.data(), uneven.size(), 2),
            (std::vector<uint32_t>{3, 5, 9, 11}));
  // A run longer than 8 parts is cut anyway (the device must start).
  std::vector<uint64_t> same(100, 7);
  const std::vector<uint8_t> all_large(same.size(), 1);
  EXPECT_EQ(partEnds(same.data(), all_large.data(), same.size(), 4).front(),
            32u);
  // Small items: every 4, runs or not (the host is the bottleneck there).
  EXPECT_EQ(partEnds(ops.data(), nullptr, ops.size(), 4).front(), 4u);
  // No chunking: one part.
  EXPECT_TRUE(partEnds(ops.data(), large.data(), ops.size(), 0).empty());
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

namespace {

// The window of a decode step over a KV cache `len` long: the same ops every
// step, their shapes one longer each time (the signature folds `len` in).
void queueDecodeStep(Stream& s, int len, std::vector<std::string>* ran) {
  static const char* ops[] = {"embed", "qkv", "cat", "sdpa", "proj", "head"};
  for (const char* op : ops) {
    signNextItem((std::hash<std::string>()(op) ^ (uint64_t(len) << 40)) | 1);
    s.enqueue(op, [op, ran] { ran->push_back(op); });
  }
}

// generate() with a growing cache: `tokens` decode windows, each followed by
// a host wait; lengths from `start`.
void generateCall(Stream& s, int start, int tokens,
                  std::vector<std::string>* ran) {
  for (int t = 0; t < tokens; ++t) {
    queueDecodeStep(s, start + t, ran);
    s.synchronize();
  }
}

}  // namespace

// Decoding with a growing KV cache: each call's windows repeat only in the
// next call, after more windows than the LRU keeps. Without the policy they
// are adapted and evicted over and over (the next test); with it, the family
// is stopped after max_fruitless_adaptations unreplayed evictions, what it
// has cached unreplayed is dropped, and nothing more is adapted or evicted.
TEST(SequenceAdapter, WindowsThatNeverComeBackInReachStopBeingAdapted) {
  AdaptiveOn on;
  adaptiveSettings().max_sequences = 4;
  adaptiveSettings().max_fruitless_adaptations = 3;
  Stream s(0, 0, 0, nullptr);
  std::vector<std::string> ran;
  for (int call = 0; call < 2; ++call) generateCall(s, 8, 10, &ran);
  // The second call adapts its windows (each seen twice): the first 4 fill
  // the LRU, the next 3 evict the first 3 unreplayed, which stops the
  // family and drops the 4 it still had cached; its last 3 windows are not
  // adapted.
  EXPECT_EQ(adaptiveStats().adapted.load(), 7u);
  EXPECT_EQ(adaptiveStats().evictions.load(), 3u);
  EXPECT_EQ(adaptiveStats().never_replayed.load(), 3u + 4u);
  EXPECT_EQ(adaptiveStats().families_stopped.load(), 1u);
  EXPECT_EQ(adaptiveStats().skipped.load(), 3u);
  EXPECT_EQ(adaptiveStats().cached.load(), 0u);
  for (int call = 0; call < 4; ++call) generateCall(s, 8, 10, &ran);
  // Later calls adapt, evict, hold nothing. Skipped: steps 7-9 every call,
  // steps 0-6 (adapted, so counted afresh) from the second of these calls.
  EXPECT_EQ(adaptiveStats().adapted.load(), 7u);
  EXPECT_EQ(adaptiveStats().evictions.load(), 3u);
  EXPECT_EQ(adaptiveStats().replays.load(), 0u);
  EXPECT_EQ(adaptiveStats().deviations.load(), 0u);
  EXPECT_EQ(adaptiveStats().skipped.load(), 3u + 4u * 3u + 3u * 7u);
  EXPECT_EQ(ran.size(), 6u * 10u * 6u);
  for (size_t i = 0; i < ran.size(); i += 6) EXPECT_EQ(ran[i], "embed");
}

// Without the policy (a family is never stopped), the same calls thrash: a
// window adapted in one call is evicted before the next, or evicts the ones
// that would have been replayed; fewer replays for three times the work.
TEST(SequenceAdapter, WithoutThePolicyGrowingWindowsThrash) {
  AdaptiveOn on;
  adaptiveSettings().max_sequences = 4;
  adaptiveSettings().max_fruitless_adaptations = 1 << 30;
  Stream s(0, 0, 0, nullptr);
  std::vector<std::string> ran;
  for (int call = 0; call < 6; ++call) generateCall(s, 8, 10, &ran);
  EXPECT_EQ(adaptiveStats().adapted.load(), 22u);
  EXPECT_EQ(adaptiveStats().evictions.load(), 18u);
  EXPECT_EQ(adaptiveStats().never_replayed.load(), 10u);
  EXPECT_EQ(adaptiveStats().families_stopped.load(), 0u);
  EXPECT_EQ(adaptiveStats().replays.load(), 10u);
}

// The same stream, after its decode family was stopped, still adapts and
// replays a training step (another family), and a stopped family's window
// that comes back within reach (a static cache: the same length every step).
TEST(SequenceAdapter, RepeatingWindowsAreStillAdaptedOnAStoppedStream) {
  AdaptiveOn on;
  adaptiveSettings().max_sequences = 4;
  adaptiveSettings().max_fruitless_adaptations = 3;
  Stream s(0, 0, 0, nullptr);
  std::vector<std::string> ran;
  for (int call = 0; call < 2; ++call) generateCall(s, 8, 10, &ran);
  ASSERT_EQ(adaptiveStats().families_stopped.load(), 1u);
  const uint64_t adapted = adaptiveStats().adapted.load();
  const uint64_t replays = adaptiveStats().replays.load();
  const std::vector<const char*> step = {"fwd", "bwd", "adamw"};
  for (int i = 0; i < 4; ++i) {
    queueWindow(s, step, &ran);
    s.synchronize();
  }
  EXPECT_EQ(adaptiveStats().adapted.load(), adapted + 1);
  EXPECT_EQ(adaptiveStats().replays.load(), replays + 2);
  // The stopped family, at a length that repeats every window.
  for (int t = 0; t < 4; ++t) {
    queueDecodeStep(s, 100, &ran);
    s.synchronize();
  }
  EXPECT_EQ(adaptiveStats().adapted.load(), adapted + 2);
  EXPECT_EQ(adaptiveStats().replays.load(), replays + 4);
}

// Periods of a stopped family: the layers of a 2-layer model repeat exactly
// twice per window (seen `threshold` times, never again); once their family
// is stopped they are not adapted, but a period that goes on is.
TEST(SequenceAdapter, StoppedPeriodsAreAdaptedOnlyIfTheyGoOn) {
  AdaptiveOn on;
  adaptiveSettings().max_sequences = 2;
  adaptiveSettings().max_fruitless_adaptations = 2;
  Stream s(0, 0, 0, nullptr);
  std::vector<std::string> ran;
  static const char* ops[] = {"l0", "l1", "l2", "l3", "l4", "l5", "l6", "l7"};
  auto layers = [&](int len, int n) {
    for (int l = 0; l < n; ++l)
      for (const char* op : ops) {
        signNextItem((std::hash<std::string>()(op) ^ (uint64_t(len) << 40)) |
                     1);
        s.enqueue(op, [op, &ran] { ran.push_back(op); });
      }
    s.synchronize();
  };
  for (int len = 1; len <= 4; ++len) layers(len, 2);  // windows never repeat
  // One period adapted per window; 2 of them evicted unreplayed: stopped
  // (and the 2 cached dropped).
  EXPECT_EQ(adaptiveStats().adapted.load(), 4u);
  EXPECT_EQ(adaptiveStats().never_replayed.load(), 2u + 2u);
  EXPECT_EQ(adaptiveStats().families_stopped.load(), 1u);
  layers(5, 2);
  EXPECT_EQ(adaptiveStats().adapted.load(), 4u);
  EXPECT_EQ(adaptiveStats().skipped.load(), 1u);
  // Many layers: adapted after the third, replayed from the fourth.
  layers(6, 6);
  EXPECT_EQ(adaptiveStats().adapted.load(), 5u);
  EXPECT_EQ(adaptiveStats().replays.load(), 3u);
  EXPECT_EQ(ran.size(), 8u * (2 * 5 + 6));
}

// Turning the mode on afresh (the generation bump) forgets stopped families.
TEST(SequenceAdapter, StartingAfreshForgetsStoppedFamilies) {
  AdaptiveOn on;
  adaptiveSettings().max_sequences = 4;
  adaptiveSettings().max_fruitless_adaptations = 3;
  Stream s(0, 0, 0, nullptr);
  std::vector<std::string> ran;
  for (int call = 0; call < 2; ++call) generateCall(s, 8, 10, &ran);
  ASSERT_EQ(adaptiveStats().families_stopped.load(), 1u);
  adaptiveSettings().generation++;
  resetAdaptiveStats();
  for (int call = 0; call < 2; ++call) generateCall(s, 8, 10, &ran);
  EXPECT_EQ(adaptiveStats().adapted.load(), 7u);  // as the first time
  EXPECT_EQ(adaptiveStats().families_stopped.load(), 1u);
}

// A static KV cache: the cache keeps its shape, but the generated ids grow by
// one every token, so each token's window starts like the last one's and
// differs at its second item. An adapted window was matched by the next one
// and deviated, every token, until the stream gave up altogether (a training
// step afterwards ran plain). Deviating before a first replay is fruitless
// too: the family is stopped, its sequences dropped, and the stream goes on
// adapting what repeats.
TEST(SequenceAdapter, WindowsThatStartAlikeAndDeviateStopBeforeGivingUp) {
  AdaptiveOn on;
  adaptiveSettings().max_sequences = 4;
  std::vector<std::string> ran;
  auto token = [&ran](Stream& s, int len) {
    static const char* ops[] = {"argmax", "cat_ids", "embed", "sdpa", "head"};
    for (const char* op : ops) {
      const uint64_t shape = std::string(op) == "cat_ids" ? len : 0;
      signNextItem((std::hash<std::string>()(op) ^ (shape << 40)) | 1);
      s.enqueue(op, [op, &ran] { ran.push_back(op); });
    }
    s.synchronize();
  };
  {  // Without the policy.
    adaptiveSettings().max_fruitless_adaptations = 1 << 30;
    Stream s(0, 0, 0, nullptr);
    for (int call = 0; call < 4; ++call)
      for (int t = 0; t < 10; ++t) token(s, 8 + t);
    EXPECT_EQ(adaptiveStats().streams_given_up.load(), 1u);
    EXPECT_EQ(adaptiveStats().replays.load(), 0u);
  }
  resetAdaptiveStats();
  adaptiveSettings().max_fruitless_adaptations = 8;
  Stream s(0, 0, 0, nullptr);
  for (int call = 0; call < 2; ++call)
    for (int t = 0; t < 10; ++t) token(s, 8 + t);
  EXPECT_EQ(adaptiveStats().families_stopped.load(), 1u);
  const uint64_t deviations = adaptiveStats().deviations.load();
  EXPECT_LT(deviations, 8u);
  // More windows than max_fruitless_windows, with nothing cached: the
  // stopped family's windows do not give the stream up.
  for (int call = 0; call < 8; ++call)
    for (int t = 0; t < 10; ++t) token(s, 8 + t);
  EXPECT_EQ(adaptiveStats().deviations.load(), deviations);
  EXPECT_EQ(adaptiveStats().streams_given_up.load(), 0u);
  EXPECT_EQ(adaptiveStats().cached.load(), 0u);
  // A training step on the same stream is adapted and replayed.
  for (int i = 0; i < 4; ++i) {
    queueWindow(s, {"fwd", "bwd", "adamw"}, &ran);
    s.synchronize();
  }
  EXPECT_EQ(adaptiveStats().replays.load(), 2u);
  EXPECT_EQ(ran.size(), 4u * 10u * 5u + 10u * 10u * 5u + 12u);
}
