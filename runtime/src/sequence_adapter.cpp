#include "neuron_runtime/sequence_adapter.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <unordered_set>

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
  // `cached` counts what the streams hold now: not a history.
}

const char* adaptiveItemLabel(const char* first, const char* last) {
  static std::mutex mu;
  static auto* labels = new std::unordered_set<std::string>();  // never freed
  std::string name = std::string("adaptive ") + first + " .. " + last;
  std::lock_guard<std::mutex> g(mu);
  return labels->insert(std::move(name)).first->c_str();
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

void SequenceAdapter::appendToWindow(uint64_t identity) {
  const AdaptiveSettings& cfg = adaptiveSettings();
  if (window_.size() >= static_cast<size_t>(cfg.max_sequence_items.load())) {
    // Too long to adapt as a whole: start the recording afresh (periods are
    // still found in what follows).
    window_broken_ = true;
    window_.clear();
    last_seen_.clear();
    period_ = 0;
    run_ = 0;
  }
  window_.push_back(identity);
  if (!window_broken_) window_hash_ = fnv1aMix(window_hash_, identity);
}

void SequenceAdapter::record(uint64_t identity) {
  const AdaptiveSettings& cfg = adaptiveSettings();
  appendToWindow(identity);
  const size_t i = window_.size() - 1;
  // Period search: does this item repeat the one `period_` items back?
  if (period_ && i >= period_ && window_[i - period_] == identity) {
    ++run_;
  } else {
    auto it = last_seen_.find(identity);
    period_ = it == last_seen_.end() ? 0 : i - it->second;
    run_ = period_ ? 1 : 0;
  }
  last_seen_[identity] = i;
  const size_t needed =
      period_ * static_cast<size_t>(std::max(1, cfg.threshold.load() - 1));
  if (period_ >= static_cast<size_t>(cfg.min_period.load()) && run_ >= needed) {
    // The last period's items are a sequence seen `threshold` times (unless
    // they are being replayed already). The search starts again either way,
    // so a sequence is never adapted again rotated by one item.
    if (!matching_ && !gave_up_) {
      std::vector<uint64_t> items(window_.end() - period_, window_.end());
      const uint64_t h = fnv1aWords(items);
      bool known = false;
      for (const Sequence& s : lru_) known |= s.hash == h;
      if (!known) adapt(h, std::move(items));
    }
    period_ = 0;
    run_ = 0;
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
  clearWindow();
  fruitless_ = 0;
  deviations_in_a_row_ = 0;
  gave_up_ = false;
}

SequenceAdapter::Action SequenceAdapter::onItem(uint64_t identity) {
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
    appendToWindow(identity);
    if (matched_ < matching_->items.size() &&
        matching_->items[matched_] == identity) {
      ++matched_;
      if (matched_ == matching_->items.size()) {
        matching_ = nullptr;  // complete; a next one may start right after
        deviations_in_a_row_ = 0;
        adaptiveStats().replays++;
        const int chunk = adaptiveSettings().chunk_items.load();
        adaptiveStats().items_held +=
            chunk > 0 ? matched_ - (matched_ - 1) / chunk * chunk : matched_;
        return Action::kComplete;
      }
      const int chunk = adaptiveSettings().chunk_items.load();
      if (chunk > 0 && matched_ % static_cast<size_t>(chunk) == 0) {
        adaptiveStats().items_held += chunk;
        return Action::kChunk;
      }
      return Action::kHold;
    }
    matching_ = nullptr;
    deviated_ = true;
    period_ = 0;  // the search starts afresh after the deviating item
    run_ = 0;
    adaptiveStats().deviations++;
    if (++deviations_in_a_row_ >= adaptiveSettings().max_deviations.load())
      giveUp("its adapted sequences deviated every time");
    return Action::kDeviate;
  }
  record(identity);
  if (deviated_) return Action::kPlain;
  if (Sequence* s = findStartingWith(identity)) {
    matching_ = s;
    held_sequence_ = s->id;
    matched_ = 1;
    period_ = 0;  // not searched while matching: starts afresh after it
    run_ = 0;
    if (s->items.size() == 1) {
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
    matching_ = nullptr;
    adaptiveStats().deviations++;
  }
  endWindow();
  return held;
}

void SequenceAdapter::endWindow() {
  const AdaptiveSettings& cfg = adaptiveSettings();
  const bool recorded = !window_.empty() && !window_broken_;
  if (recorded && !gave_up_) {
    adaptiveStats().windows++;
    bool known = false;
    for (const Sequence& s : lru_) known |= s.hash == window_hash_;
    if (!known) {
      if (seen_.size() >= kMaxSeen) seen_.clear();
      const int count = ++seen_[window_hash_];
      if (count >= cfg.threshold.load()) {
        adapt(window_hash_, window_);
        seen_.erase(window_hash_);
      } else if (++fruitless_ >= cfg.max_fruitless_windows.load() &&
                 lru_.empty()) {
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
  window_hash_ = kFnv1aBasis;
  window_broken_ = false;
  last_seen_.clear();
  period_ = 0;
  run_ = 0;
  deviated_ = false;
  matched_ = 0;
}

void SequenceAdapter::adapt(uint64_t hash, std::vector<uint64_t> items) {
  fruitless_ = 0;
  static std::atomic<uint64_t> next_id{1};
  lru_.push_front(Sequence{hash, std::move(items), next_id.fetch_add(1)});
  adaptiveStats().adapted++;
  adaptiveStats().cached++;
  const size_t limit =
      static_cast<size_t>(adaptiveSettings().max_sequences.load());
  while (lru_.size() > limit) {
    if (matching_ == &lru_.back()) matching_ = nullptr;
    lru_.pop_back();
    adaptiveStats().evictions++;
    adaptiveStats().cached--;
  }
}

}  // namespace neuron_rt
