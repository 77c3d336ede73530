#include "neuron_runtime/sequence_adapter.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "neuron_runtime/fnv1a.h"

namespace neuron_rt {
namespace {

constexpr size_t kMaxSeen = 1024;

thread_local uint64_t tls_signature = 0;

}  // namespace

AdaptiveSettings& adaptiveSettings() {
  static AdaptiveSettings s;
  return s;
}

AdaptiveStats& adaptiveStats() {
  static AdaptiveStats s;
  return s;
}

void resetAdaptiveStats() {
  AdaptiveStats& s = adaptiveStats();
  s.windows = 0;
  s.adapted = 0;
  s.replays = 0;
  s.deviations = 0;
  s.items_held = 0;
  s.evictions = 0;
  s.streams_given_up = 0;
  s.never_replayed = 0;
  s.families_stopped = 0;
  s.skipped = 0;
  s.fused_groups = 0;
  s.fused_items = 0;
  // `cached` counts what the streams hold now: not a history.
}

const char* rangeLabel(const char* kind, const char* first, const char* last) {
  static std::mutex mu;
  // By the pointers (labels live for the process): no string built for a
  // label made before. Never freed.
  static auto* labels =
      new std::map<std::tuple<const char*, const char*, const char*>,
                   std::string>();
  std::lock_guard<std::mutex> g(mu);
  auto [it, fresh] = labels->try_emplace({kind, first, last});
  if (fresh) it->second = std::string(kind) + " " + first + " .. " + last;
  return it->second.c_str();
}

SequenceAdapter::~SequenceAdapter() { adaptiveStats().cached -= lru_.size(); }

void signNextItem(uint64_t signature) { tls_signature = signature; }

uint64_t takeItemSignature() {
  const uint64_t s = tls_signature;
  tls_signature = 0;
  return s;
}

SequenceAdapter::Sequence* SequenceAdapter::findStartingWith(uint64_t id) {
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    if (!it->items.empty() && it->items.front() == id) {
      lru_.splice(lru_.begin(), lru_, it);  // most recently used
      return &lru_.front();
    }
  }
  return nullptr;
}

void SequenceAdapter::appendToWindow(uint64_t identity, uint64_t op,
                                     bool large) {
  const AdaptiveSettings& cfg = adaptiveSettings();
  if (window_.size() >= static_cast<size_t>(cfg.max_sequence_items.load())) {
    // Too long to adapt as a whole: start the recording afresh (periods are
    // still found in what follows).
    window_broken_ = true;
    window_.clear();
    ops_.clear();
    large_.clear();
    last_seen_.clear();
    period_ = 0;
    run_ = 0;
    period_extra_ = 0;
  }
  window_.push_back(identity);
  ops_.push_back(op);
  large_.push_back(large ? 1 : 0);
  if (!window_broken_) {
    window_hash_ = fnv1aMix(window_hash_, identity);
    window_family_ = fnv1aMix(window_family_, op);
  }
}

void SequenceAdapter::record(uint64_t identity, uint64_t op, bool large) {
  const AdaptiveSettings& cfg = adaptiveSettings();
  appendToWindow(identity, op, large);
  const size_t i = window_.size() - 1;
  // Period search: does this item repeat the one `period_` items back?
  if (period_ && i >= period_ && window_[i - period_] == identity) {
    ++run_;
  } else {
    auto it = last_seen_.find(identity);
    period_ = it == last_seen_.end() ? 0 : i - it->second;
    run_ = period_ ? 1 : 0;
    period_extra_ = 0;
  }
  last_seen_[identity] = i;
  const size_t needed =
      period_ * static_cast<size_t>(std::max(1, cfg.threshold.load() - 1));
  if (period_ >= static_cast<size_t>(cfg.min_period.load()) &&
      run_ >= needed + period_extra_) {
    // The last period's items are a sequence seen `threshold` times (unless
    // they are being replayed already). The search starts again either way,
    // so a sequence is never adapted again rotated by one item.
    if (!matching_ && !gave_up_) {
      std::vector<uint64_t> items(window_.end() - period_, window_.end());
      const uint64_t h = fnv1aWords(items);
      bool known = false;
      for (const Sequence& s : lru_) known |= s.hash == h;
      if (!known) {
        uint64_t family = kFnv1aBasis;  // as window_family_ is mixed
        for (size_t k = ops_.size() - period_; k < ops_.size(); ++k)
          family = fnv1aMix(family, ops_[k]);
        if (period_extra_ == 0 && stopped(family)) {
          // Its family's sequences were never replayed (say the layers of a
          // 2-layer model, decoding with shapes that grow every token: each
          // period is seen exactly twice). Adapted only if it goes on one
          // more period, at the same phase (the same rotation, the same
          // family); the search goes on meanwhile.
          period_extra_ = period_;
          adaptiveStats().skipped++;
          return;
        }
        adapt(h, std::move(items), family, ops_.data() + ops_.size() - period_,
              large_.data() + large_.size() - period_);
      }
    }
    period_ = 0;
    run_ = 0;
    period_extra_ = 0;
  }
}

bool SequenceAdapter::stopped(uint64_t family) const {
  if (families_.empty()) return false;
  auto it = families_.find(family);
  return it != families_.end() && it->second.stopped;
}

void SequenceAdapter::replayed(Sequence& s) {
  s.replayed = true;
  // A family whose sequences come back is not fruitless: its count starts
  // again (a stopped family stays stopped until the mode starts afresh).
  if (families_.empty()) return;
  auto it = families_.find(s.family);
  if (it != families_.end()) it->second.fruitless = 0;
}

void SequenceAdapter::fruitless(uint64_t family) {
  if (families_.size() >= kMaxSeen && !families_.count(family))
    families_.clear();  // bounded; what is forgotten is learned again
  Family& f = families_[family];
  if (f.stopped) return;
  if (++f.fruitless < adaptiveSettings().max_fruitless_adaptations.load())
    return;
  f.stopped = true;
  adaptiveStats().families_stopped++;
  // What the family has cached and never replayed goes too: by the family's
  // record it would not be replayed either, and it would go on deviating
  // (a static KV cache: every token's window starts like the last one's and
  // differs at the ids grown by one) until the stream gives up altogether.
  for (auto it = lru_.begin(); it != lru_.end();) {
    if (it->family == family && !it->replayed && &*it != matching_) {
      it = lru_.erase(it);
      adaptiveStats().never_replayed++;
      adaptiveStats().cached--;
    } else {
      ++it;
    }
  }
}

void SequenceAdapter::forgetIfStale() {
  const uint64_t g =
      adaptiveSettings().generation.load(std::memory_order_relaxed);
  if (g == generation_) return;
  if (matching_) return;  // held items run first; forgotten after them
  generation_ = g;
  adaptiveStats().cached -= lru_.size();
  lru_.clear();
  seen_.clear();
  families_.clear();
  window_index_ = 0;
  clearWindow();
  fruitless_ = 0;
  deviations_in_a_row_ = 0;
  gave_up_ = false;
}

SequenceAdapter::Action SequenceAdapter::onItem(uint64_t identity, uint64_t op,
                                                bool large) {
  forgetIfStale();
  if (identity == 0) {  // unsigned: a boundary of its own
    const bool held = onBoundary();
    return held ? Action::kDeviate : Action::kPlain;
  }
  if (gave_up_) return Action::kPlain;
  // Match an adapted sequence. While one is being matched, the window only
  // grows: no period search (its items are a known sequence), which keeps a
  // replayed item's host cost low.
  if (matching_) {
    appendToWindow(identity, op, large);
    if (matched_ < matching_->items.size() &&
        matching_->items[matched_] == identity) {
      ++matched_;
      if (matched_ == matching_->items.size()) {
        replayed(*matching_);
        const size_t part_start =
            next_part_ > 0 ? matching_->part_ends[next_part_ - 1] : 0;
        matching_ = nullptr;  // complete; a next one may start right after
        deviations_in_a_row_ = 0;
        adaptiveStats().replays++;
        adaptiveStats().items_held += matched_ - part_start;
        return Action::kComplete;
      }
      const auto& ends = matching_->part_ends;
      if (next_part_ < ends.size() && matched_ == ends[next_part_]) {
        adaptiveStats().items_held +=
            matched_ - (next_part_ > 0 ? ends[next_part_ - 1] : 0);
        ++next_part_;
        return Action::kChunk;
      }
      return Action::kHold;
    }
    Sequence* deviating = matching_;
    matching_ = nullptr;
    deviated_ = true;
    period_ = 0;  // the search starts afresh after the deviating item
    run_ = 0;
    adaptiveStats().deviations++;
    // Deviating before its first replay: fruitless so far (may drop it).
    if (!deviating->replayed) fruitless(deviating->family);
    if (++deviations_in_a_row_ >= adaptiveSettings().max_deviations.load())
      giveUp("its adapted sequences deviated every time");
    return Action::kDeviate;
  }
  record(identity, op, large);
  if (deviated_) return Action::kPlain;
  if (Sequence* s = findStartingWith(identity)) {
    matching_ = s;
    held_sequence_ = s->id;
    matched_ = 1;
    next_part_ = 0;
    period_ = 0;  // not searched while matching: starts afresh after it
    run_ = 0;
    if (s->items.size() == 1) {
      replayed(*s);
      matching_ = nullptr;
      adaptiveStats().replays++;
      adaptiveStats().items_held += 1;
      return Action::kComplete;
    }
    return Action::kHold;
  }
  return Action::kPlain;
}

void SequenceAdapter::giveUp(const char* why) {
  if (gave_up_) return;
  gave_up_ = true;
  adaptiveStats().streams_given_up++;
  adaptiveStats().cached -= lru_.size();
  lru_.clear();
  std::fprintf(stderr,
               "neuron adaptive eager: a stream runs plain eager from now on: "
               "%s\n",
               why);
}

bool SequenceAdapter::onBoundary() {
  const bool held = matching_ != nullptr;
  if (held) {
    // The boundary came before the sequence was complete: a deviation.
    Sequence* deviating = matching_;
    matching_ = nullptr;
    adaptiveStats().deviations++;
    if (!deviating->replayed) fruitless(deviating->family);
  }
  endWindow();
  return held;
}

void SequenceAdapter::endWindow() {
  const AdaptiveSettings& cfg = adaptiveSettings();
  const bool recorded = !window_.empty() && !window_broken_;
  if (recorded && !gave_up_) {
    adaptiveStats().windows++;
    const uint64_t now = ++window_index_;
    bool known = false;
    for (const Sequence& s : lru_) known |= s.hash == window_hash_;
    if (!known) {
      if (seen_.size() >= kMaxSeen && !seen_.count(window_hash_)) seen_.clear();
      Seen& seen = seen_[window_hash_];
      // Back within `max_sequences` windows: the LRU would still hold it
      // when it next comes (at most that many others were adapted since).
      const bool within_reach =
          seen.count > 0 &&
          now - seen.last <= static_cast<uint64_t>(cfg.max_sequences.load());
      const int count = ++seen.count;
      seen.last = now;
      bool adapted = false;
      if (count >= cfg.threshold.load()) {
        if (!within_reach && stopped(window_family_)) {
          // A family whose sequences were evicted (or deviated) before a
          // first replay, and a window that came back too late to be kept:
          // adapting it would only evict it again (generate()'s decode
          // steps).
          adaptiveStats().skipped++;
        } else {
          adapt(window_hash_, window_, window_family_, ops_.data(),
                large_.data());
          seen_.erase(window_hash_);
          adapted = true;
        }
      }
      // A stopped family's windows are not counted: its stop accounts for
      // them, and counting them would give the whole stream up (a training
      // step after generate() would run plain) once its sequences are gone.
      if (!adapted && !stopped(window_family_) &&
          ++fruitless_ >= cfg.max_fruitless_windows.load() && lru_.empty()) {
        giveUp(
            "its windows of work between synchronizations never repeated "
            "(shapes changing every step?)");
      }
    }
  }
  clearWindow();
}

void SequenceAdapter::clearWindow() {
  window_.clear();
  ops_.clear();
  large_.clear();
  window_hash_ = kFnv1aBasis;
  window_family_ = kFnv1aBasis;
  window_broken_ = false;
  last_seen_.clear();
  period_ = 0;
  run_ = 0;
  period_extra_ = 0;
  deviated_ = false;
  matched_ = 0;
}

std::vector<uint32_t> partEnds(const uint64_t* ops, const uint8_t* large,
                               size_t count, int chunk) {
  std::vector<uint32_t> ends;
  if (chunk <= 0 || count == 0) return ends;
  // Runs of one op: where each starts.
  std::vector<size_t> run_start(count), run_length(count);
  for (size_t i = 0; i < count;) {
    size_t j = i + 1;
    while (j < count && ops[j] == ops[i]) ++j;
    for (size_t k = i; k < j; ++k) {
      run_start[k] = i;
      run_length[k] = j - i;
    }
    i = j;
  }
  // Blocks (runs of one op) holding a large item.
  std::vector<uint8_t> block_large(count, 0);
  for (size_t i = 0; i < count && large; ++i)
    if (large[i]) block_large[run_start[i]] = 1;
  auto big = [&](size_t i) { return block_large[run_start[i]] != 0; };
  // Whether a part may end after p items (between items p - 1 and p).
  auto may_end = [&](size_t p) {
    if (!big(p - 1) && !big(p)) return true;
    if (ops[p - 1] == ops[p]) return false;  // inside a block
    const size_t before = run_length[p - 1], after = run_length[p];
    return !(before >= 2 && before == after);  // inside a foreach run
  };
  const size_t step = static_cast<size_t>(chunk);
  size_t last = 0;
  for (size_t p = step; p < count;) {
    size_t q = p;
    while (q < count && q < last + 8 * step && !may_end(q)) ++q;
    if (q >= count) break;
    ends.push_back(static_cast<uint32_t>(q));
    last = q;
    p = q + step;
  }
  return ends;
}

void SequenceAdapter::adapt(uint64_t hash, std::vector<uint64_t> items,
                            uint64_t family, const uint64_t* ops,
                            const uint8_t* large) {
  fruitless_ = 0;
  static std::atomic<uint64_t> next_id{1};
  std::vector<uint32_t> ends =
      partEnds(ops, large, items.size(), adaptiveSettings().chunk_items.load());
  lru_.push_front(Sequence{hash, std::move(items), next_id.fetch_add(1), family,
                           std::move(ends)});
  adaptiveStats().adapted++;
  adaptiveStats().cached++;
  const size_t limit =
      static_cast<size_t>(adaptiveSettings().max_sequences.load());
  while (lru_.size() > limit) {
    if (matching_ == &lru_.back()) matching_ = nullptr;
    const uint64_t family = lru_.back().family;
    const bool replayed = lru_.back().replayed;
    lru_.pop_back();
    adaptiveStats().evictions++;
    adaptiveStats().cached--;
    if (!replayed) {
      adaptiveStats().never_replayed++;
      fruitless(family);
    }
  }
}

}  // namespace neuron_rt
