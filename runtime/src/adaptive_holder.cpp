#include "neuron_runtime/adaptive_holder.h"

#include <memory>
#include <string>
#include <utility>

#include "neuron_runtime/captured_work.h"
#include "neuron_runtime/fnv1a.h"

namespace neuron_rt {

uint64_t AdaptiveHolder::identity(const char* label, ItemKind kind,
                                  uint64_t signature) {
  if (!signature) return 0;
  return fnv1aMix(signature, reinterpret_cast<uintptr_t>(label)) +
         static_cast<uint64_t>(kind);
}

bool AdaptiveHolder::offer(WorkItem& item, uint64_t signature, bool boundary,
                           ItemSink& sink) {
  std::lock_guard<std::mutex> g(mu_);
  if (boundary) {
    adapter_.onBoundary();
    releaseLocked(sink);  // what is held runs first: order is kept
    return false;
  }
  // The op alone (label and kind) tells a sequence's family: the same ops on
  // other shapes (sequence_adapter.h).
  const uint64_t op = fnv1aMix(reinterpret_cast<uintptr_t>(item.label),
                               static_cast<uint64_t>(item.kind));
  switch (adapter_.onItem(identity(item.label, item.kind, signature), op,
                          (signature & 1) != 0)) {
    case SequenceAdapter::Action::kPlain:
      return false;
    case SequenceAdapter::Action::kHold:
      held_.push_back(std::move(item));
      holding_.store(true, std::memory_order_release);
      return true;
    case SequenceAdapter::Action::kComplete:
    case SequenceAdapter::Action::kChunk:
      held_.push_back(std::move(item));
      releaseLocked(sink);
      return true;
    case SequenceAdapter::Action::kDeviate:
      releaseLocked(sink);  // what was held first, then this item
      return false;
  }
  return false;
}

void AdaptiveHolder::boundary(ItemSink& sink) {
  std::lock_guard<std::mutex> g(mu_);
  adapter_.onBoundary();
  releaseLocked(sink);
}

bool AdaptiveHolder::boundaryIfHolding(ItemSink& sink) {
  if (!holding()) return false;
  std::lock_guard<std::mutex> g(mu_);
  if (held_.empty()) return false;
  adapter_.onBoundary();
  releaseLocked(sink);
  return true;
}

void AdaptiveHolder::release(ItemSink& sink) {
  std::lock_guard<std::mutex> g(mu_);
  releaseLocked(sink);
}

void AdaptiveHolder::releaseLocked(ItemSink& sink) {
  if (held_.empty()) return;
  holding_.store(false, std::memory_order_release);
  if (held_.size() == 1) {  // nothing to combine
    WorkItem item = std::move(held_.front());
    held_.clear();
    sink.put(std::move(item));
    return;
  }
  const char* label =
      rangeLabel("adaptive", held_.front().label, held_.back().label);
  auto combined =
      std::make_unique<HeldItemsTask>(label, adapter_.heldSequence());
  combined->work().reserve(held_.size());
  WorkItem out;
  out.label = label;
  if (sink.tracing()) {
    // The first op's correlation, thread and queue time; its work and
    // estimate are its own step's. The item is a program of its steps, known
    // before it runs (the sequence was recorded): its estimate is one
    // pipeline of them, as a compiled program's (trainium_estimate.h).
    const ItemNote& first = held_.front().note;
    out.note.correlation = first.correlation;
    out.note.queued_ns = first.queued_ns;
    out.note.host_thread = first.host_thread;
    out.note.set = false;
    out.note.category = ItemCategory::kProgram;
    out.note.pipelined = true;
    out.note.adaptive_sequence = adapter_.heldSequence();
  }
  for (WorkItem& item : held_) {
    if (item.task) item.task->released();
    combined->work().add(std::move(item));
  }
  held_.clear();  // its capacity serves the next part
  out.task = std::move(combined);
  sink.put(std::move(out));
}

}  // namespace neuron_rt
