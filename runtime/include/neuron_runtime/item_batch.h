// A stream's batch (a compiled program is one work item): while a batch is
// open, the compute and copy items queued on the stream are held here, and
// leave as ONE item that runs them in order (a HeldItemsTask: a failing step
// ends it, and the error names the batch and the step).
//
// The stream decides what is held (not markers) and when the held items
// leave (a marker, a host wait, a capture, the batch's end); this class
// keeps them and their label. Thread-safe: host threads queueing on the
// stream and one asking whether anything is held may call it at once.
#pragma once

#include <atomic>
#include <mutex>
#include <vector>

#include "neuron_runtime/work_item.h"

namespace neuron_rt {

class ItemBatch {
 public:
  ItemBatch() = default;
  ItemBatch(const ItemBatch&) = delete;
  ItemBatch& operator=(const ItemBatch&) = delete;

  // Opens a batch whose held items leave as one item labelled `label` (it
  // must outlive the process), described by `note` (while tracing). What an
  // earlier batch still held goes to *flushed, as take() gives it; returns
  // whether there was any.
  bool begin(const char* label, ItemNote note, WorkItem* flushed);
  // Closes the batch; what it held goes to *flushed (see begin()).
  bool end(WorkItem* flushed);
  bool open() const { return open_.load(std::memory_order_acquire); }

  // Holds `item` if a batch is open (the item is moved from); false if not:
  // the caller queues it itself.
  bool hold(WorkItem& item);
  // What is held, as one item (the batch stays open: a batch flushed early
  // and resumed runs as several items of the same program). False if
  // nothing is held.
  bool take(WorkItem* out);
  bool holdsItems() const;

 private:
  bool takeLocked(WorkItem* out);

  std::atomic<bool> open_{false};
  mutable std::mutex mu_;  // everything below
  const char* label_ = "";
  ItemNote note_;
  std::vector<WorkItem> held_;
};

}  // namespace neuron_rt
