// Pinned (page-locked in a hardware runtime) host memory: the memory
// `Tensor.pin_memory()` returns. Copies between pinned memory and the device
// can be asynchronous (`non_blocking=True`); the queued copy keeps its host
// tensor alive until it has run, so the buffer is never reused early.
#pragma once

#include <c10/core/Allocator.h>

namespace torch_neuronx {

class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;
  // True if `ptr` points into a live pinned allocation.
  bool isPinned(const void* ptr) const;
};

PinnedAllocator& pinnedAllocator();

}  // namespace torch_neuronx
