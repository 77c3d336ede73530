// Adaptive eager: a stream notices a sequence of eager items that repeats
// between synchronization points (a training or decode step) and, once it
// has seen it `threshold` times, runs its next occurrences as ONE work item.
//
// The items are the very items plain eager queues, run in the same order:
// holding them changes when they run, never what they compute. A window is
// what a stream queues between two boundaries: a host wait (synchronize,
// waitFor, query), a marker (event record or wait), an item that is not
// adaptable (a collective, a compiled program, an NKI kernel: anything the
// host did not sign), or a capture. Windows are identified by the sequence of
// their items' identities (the op and its argument signature: dtypes, shapes,
// strides, scalars, aliasing). When a window starts like an adapted sequence,
// its items are held; the held items run as one item when the sequence is
// complete or a boundary comes, and as soon as an item deviates (they run,
// in order, then the stream goes on plainly until the next boundary).
//
// Code that never synchronizes (a training loop that does not read its loss)
// has one endless window; there a sequence is found as a period: the last P
// items (P >= 8) equal the P before them.
//
// Sequences that never come back. A sequence is worth adapting only if it
// comes back while the stream still keeps it. Decoding with a KV cache
// (Hugging Face generate()) is the case in point: every token's window works
// on shapes one longer than the last (the cache, with a dynamic cache; the
// generated ids, with a static one too), so within a call no window repeats;
// across calls each returns only after the 30-odd others, long after the LRU
// dropped it. Each was adapted and evicted unreplayed, or (a static cache)
// matched by the next token's window, which starts alike, and deviated, until
// the stream gave up altogether. So each adapted sequence remembers its
// family (its ops in order, shapes aside) and whether it was ever replayed.
// A family whose sequences are evicted or deviate before their first replay
// `max_fruitless_adaptations` times in a row (none replayed in between) is
// stopped on that stream: its cached sequences that were never replayed are
// dropped, its windows are adapted only if they come back within
// `max_sequences` windows (the LRU would still hold them when they next
// come), and its periods only once they repeat one more time than the
// threshold asks. Other families (a training step in the same process) are
// adapted as before. All of it is decided where a window ends, a sequence is
// evicted or deviates, never per item; turning the mode on afresh (the
// generation bump) forgets it.
//
// The first stage of the mode runs the held items as they are; the second
// (sequence_fusion.h) runs chains of them as fused passes, where a complete
// sequence, or a part of one, runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "neuron_runtime/fnv1a.h"

namespace neuron_rt {

struct AdaptiveSettings {
  std::atomic<bool> enabled{false};
  // Occurrences of a window before its next occurrences are adapted.
  std::atomic<int> threshold{2};
  // Adapted sequences kept per stream (least recently used go first).
  std::atomic<int> max_sequences{16};
  // Windows a stream records without ever adapting one before it gives up
  // (shapes that change every step): it then runs plainly, saying so once.
  std::atomic<int> max_fruitless_windows{64};
  // Windows longer than this are not adapted as a whole (they can still
  // contain periods); the recording starts afresh.
  std::atomic<int> max_sequence_items{4096};
  // The shortest period adapted (shorter ones are loops over a few ops).
  std::atomic<int> min_period{8};
  // Adapted sequences that deviate this many times in a row, with no
  // complete replay between: the stream gives up (saying so once).
  std::atomic<int> max_deviations{16};
  // Sequences of one family (the same ops, shapes aside) evicted, or
  // deviating, before their first replay, in a row, before the stream stops
  // adapting the family's windows unless they come back in reach (above).
  std::atomic<int> max_fruitless_adaptations{8};
  // A long sequence runs in parts of about this many items (0: whole), so
  // the device starts on a step while the host is still issuing it
  // (partEnds: a part does not end inside a foreach run).
  std::atomic<int> chunk_items{64};
  // Runs an adapted sequence's elementwise chains as fused passes, tile by
  // tile (sequence_fusion.h), where the host's runner can.
  std::atomic<bool> fuse{true};
  // Bumped to make every stream forget what it learned (adapted sequences,
  // counts, giving up): turning the mode on starts afresh.
  std::atomic<uint64_t> generation{0};
};
AdaptiveSettings& adaptiveSettings();

struct AdaptiveStats {
  std::atomic<uint64_t> windows{0};     // windows recorded
  std::atomic<uint64_t> adapted{0};     // sequences adapted (built)
  std::atomic<uint64_t> replays{0};     // complete sequences run as one item
  std::atomic<uint64_t> deviations{0};  // held sequences that deviated
  std::atomic<uint64_t> items_held{0};  // items that ran inside a replay
  std::atomic<uint64_t> evictions{0};   // sequences dropped by the LRU
  std::atomic<uint64_t> streams_given_up{0};
  std::atomic<uint64_t> cached{0};  // sequences cached now, all streams
  // Left a stream's cache without a single replay: evicted (counted in
  // `evictions` too), or dropped when their family was stopped.
  std::atomic<uint64_t> never_replayed{0};
  // Families a stream stopped adapting (their sequences never came back).
  std::atomic<uint64_t> families_stopped{0};
  // Windows and periods seen `threshold` times but not adapted: their family
  // was stopped and they did not come back within reach.
  std::atomic<uint64_t> skipped{0};
  // Fused passes run (each one group of an adapted sequence's steps), and
  // the steps they ran.
  std::atomic<uint64_t> fused_groups{0};
  std::atomic<uint64_t> fused_items{0};
};
AdaptiveStats& adaptiveStats();
void resetAdaptiveStats();

// The host signs the next item it queues from this thread: 0 = unsigned
// (not adaptable); the lowest bit set: a large item (its device work takes
// far longer than the host takes to issue it). Read (and reset) by the
// stream the item goes to.
void signNextItem(uint64_t signature);
uint64_t takeItemSignature();

// "<kind> <first> .. <last>", interned (it lives for the process, as item
// labels must): the item a held sequence runs as ("adaptive"), a fused step
// of one ("fused"). `kind`, `first` and `last` live for the process too.
const char* rangeLabel(const char* kind, const char* first, const char* last);

// Where the parts of a sequence of `count` items with ops `ops` end: about
// every `chunk` items, but not inside a block of one op (a _foreach_ op
// queues one item per tensor) nor between two blocks of one length in a row
// (a foreach run, which fusion runs tensor by tensor: all of its blocks must
// be in one part) when the block holds a large item (`large`, may be null:
// none), unless that would make a part longer than 8 x chunk. Small items
// keep parts short: there the host is the bottleneck, and a part the device
// waits for while the host issues a long run costs more than fusion saves
// (the small GPT's step: 5.3 -> 6.1 ms with whole runs, 4.4 ms without).
std::vector<uint32_t> partEnds(const uint64_t* ops, const uint8_t* large,
                               size_t count, int chunk);

// One stream's window bookkeeping. Not thread-safe: the stream calls it
// under its own lock.
class SequenceAdapter {
 public:
  SequenceAdapter() = default;
  SequenceAdapter(const SequenceAdapter&) = delete;
  SequenceAdapter& operator=(const SequenceAdapter&) = delete;
  ~SequenceAdapter();

  enum class Action {
    kPlain,     // queue the item as usual
    kHold,      // hold it (a sequence is being matched)
    kComplete,  // hold it; the sequence is complete: run what is held
    kChunk,     // hold it; run what is held (a part), and go on matching
    kDeviate,   // run what is held, then queue this item as usual
  };

  // An item with `identity` (label and signature; 0 when unsigned) whose op
  // (label and kind, without the signature) is `op`; `large`: its signature
  // says it is large.
  Action onItem(uint64_t identity, uint64_t op, bool large = false);
  // The window ends (a boundary). Returns true if items were being held
  // (the caller runs them).
  bool onBoundary();
  bool holding() const { return matching_ != nullptr; }
  // The id of the adapted sequence whose items are (or were last) held:
  // unique in the process, from 1, in the order sequences were adapted.
  uint64_t heldSequence() const { return held_sequence_; }

 private:
  struct Sequence {
    uint64_t hash;
    std::vector<uint64_t> items;
    uint64_t id;
    uint64_t family;  // the hash of its ops (shapes aside)
    // Where its parts end (item counts, ascending; the sequence's end is
    // not listed): partEnds().
    std::vector<uint32_t> part_ends;
    bool replayed = false;
  };
  // A window seen before: how often, and the window index it was last seen.
  struct Seen {
    int count = 0;
    uint64_t last = 0;
  };
  // A family with sequences evicted, or deviating, before their first
  // replay.
  struct Family {
    int fruitless = 0;  // in a row, since one of its sequences was replayed
    bool stopped = false;
  };
  void endWindow();
  void clearWindow();  // a new, empty window (the search starts again)
  void adapt(uint64_t hash, std::vector<uint64_t> items, uint64_t family,
             const uint64_t* ops, const uint8_t* large);
  void appendToWindow(uint64_t identity, uint64_t op, bool large);
  // Appends, searches a period.
  void record(uint64_t identity, uint64_t op, bool large);
  void replayed(Sequence& s);
  // One of `family`'s sequences was evicted, or deviated, before its first
  // replay.
  void fruitless(uint64_t family);
  bool stopped(uint64_t family) const;
  void giveUp(const char* why);
  Sequence* findStartingWith(uint64_t identity);

  // The window being recorded: its items' identities and ops.
  std::vector<uint64_t> window_;
  std::vector<uint64_t> ops_;
  std::vector<uint8_t> large_;  // whether each item is large
  uint64_t window_hash_ = kFnv1aBasis;
  uint64_t window_family_ = kFnv1aBasis;  // the hash of ops_
  bool window_broken_ = false;  // grew too long: not adapted as a whole
  // Period search over window_: where each identity was last seen, the
  // candidate period and how many items in a row repeat it.
  std::unordered_map<uint64_t, size_t> last_seen_;
  size_t period_ = 0;
  size_t run_ = 0;
  // A period of a stopped family must repeat this many more items before
  // it is adapted (0: none asked yet).
  size_t period_extra_ = 0;
  int deviations_in_a_row_ = 0;
  uint64_t generation_ = 0;
  void forgetIfStale();
  // How often each window hash was seen, and when last (bounded).
  std::unordered_map<uint64_t, Seen> seen_;
  uint64_t window_index_ = 0;  // windows recorded (the clock of Seen::last)
  // Families with sequences evicted unreplayed (bounded).
  std::unordered_map<uint64_t, Family> families_;
  // Adapted sequences, most recently used first.
  std::list<Sequence> lru_;
  Sequence* matching_ = nullptr;
  uint64_t held_sequence_ = 0;  // matching_'s id (kept after it completes)
  size_t matched_ = 0;
  size_t next_part_ = 0;   // matching_->part_ends' next
  bool deviated_ = false;  // this window deviated: no new match until it ends
  int fruitless_ = 0;
  bool gave_up_ = false;
};

}  // namespace neuron_rt
