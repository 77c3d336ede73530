// Adaptive eager's side of a stream: the items held while a repeated
// sequence is being matched (sequence_adapter.h decides, item by item), and
// where they go when they leave: to the stream's queue, as ONE item that runs
// them in order (a HeldItemsTask labelled "adaptive <first> .. <last>"), or
// as themselves when only one is held.
//
// Held items leave while this holder's lock is held, so that an item another
// host thread queues meanwhile cannot overtake them. Thread-safe.
#pragma once

#include <atomic>
#include <mutex>
#include <vector>

#include "neuron_runtime/sequence_adapter.h"
#include "neuron_runtime/work_item.h"

namespace neuron_rt {

// Where held items go when they leave: the stream's queue (past any batch:
// nothing is held here while a batch is open).
class ItemSink {
 public:
  virtual bool tracing() const = 0;
  // Queues `item` (its note only while tracing).
  virtual void put(WorkItem&& item) = 0;

 protected:
  ~ItemSink() = default;
};

class AdaptiveHolder {
 public:
  AdaptiveHolder() = default;
  AdaptiveHolder(const AdaptiveHolder&) = delete;
  AdaptiveHolder& operator=(const AdaptiveHolder&) = delete;

  // Whether queued items must be offered: the mode is on, or items are held
  // (held items still go first when the mode is switched off meanwhile).
  bool engaged() const {
    return adaptiveSettings().enabled.load(std::memory_order_relaxed) ||
           holding();
  }
  bool holding() const { return holding_.load(std::memory_order_acquire); }

  // An item queued while engaged, signed `signature` by the host (0:
  // unsigned, not adaptable). `boundary`: it ends the window whatever it is
  // (a marker; a batch or capture is open). Returns true when the item was
  // taken (held, or sent to `sink` with what was held); false: the caller
  // queues it, after anything held has gone to `sink`.
  bool offer(WorkItem& item, uint64_t signature, bool boundary, ItemSink& sink);
  // A boundary (a host wait, a capture): the window ends and what is held
  // goes to `sink`.
  void boundary(ItemSink& sink);
  // A host polls (query): if anything is held, a boundary; returns whether
  // anything was held.
  bool boundaryIfHolding(ItemSink& sink);
  // What is held goes to `sink`; the window goes on (the stream's end).
  void release(ItemSink& sink);

  // The item's identity in a sequence: its label and signature (0 for an
  // unsigned item).
  static uint64_t identity(const char* label, ItemKind kind,
                           uint64_t signature);

 private:
  void releaseLocked(ItemSink& sink);

  std::mutex mu_;  // adapter_ and held_; held while held items leave
  SequenceAdapter adapter_;
  std::vector<WorkItem> held_;
  std::atomic<bool> holding_{false};  // held_ is not empty
};

}  // namespace neuron_rt
