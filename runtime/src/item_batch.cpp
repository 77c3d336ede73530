#include "neuron_runtime/item_batch.h"

#include <utility>

#include "neuron_runtime/captured_work.h"

namespace neuron_rt {

bool ItemBatch::begin(const char* label, ItemNote note, WorkItem* flushed) {
  std::lock_guard<std::mutex> g(mu_);
  const bool any = takeLocked(flushed);
  label_ = label;
  note_ = std::move(note);
  open_.store(true, std::memory_order_release);
  return any;
}

bool ItemBatch::end(WorkItem* flushed) {
  std::lock_guard<std::mutex> g(mu_);
  const bool any = takeLocked(flushed);
  open_.store(false, std::memory_order_release);
  return any;
}

bool ItemBatch::hold(WorkItem& item) {
  if (!open()) return false;
  std::lock_guard<std::mutex> g(mu_);
  if (!open_.load(std::memory_order_relaxed)) return false;
  held_.push_back(std::move(item));
  return true;
}

bool ItemBatch::take(WorkItem* out) {
  std::lock_guard<std::mutex> g(mu_);
  return takeLocked(out);
}

bool ItemBatch::takeLocked(WorkItem* out) {
  if (held_.empty()) return false;
  auto batch = std::make_unique<HeldItemsTask>(label_);
  batch->work().reserve(held_.size());
  for (WorkItem& item : held_) batch->work().add(std::move(item));
  held_.clear();
  out->label = label_;
  out->kind = ItemKind::kCompute;
  out->fn = nullptr;
  out->task = std::move(batch);
  out->note = note_;  // a batch flushed early and resumed: same program
  return true;
}

bool ItemBatch::holdsItems() const {
  std::lock_guard<std::mutex> g(mu_);
  return !held_.empty();
}

}  // namespace neuron_rt
