// Pinned (page-locked in a hardware runtime) host memory: the memory
// `Tensor.pin_memory()` returns and `DataLoader(pin_memory=True)` fills.
//
// A caching allocator built on torch's generic at::CachingHostAllocatorImpl
// (the machinery of CUDA's CachingHostAllocator): freed blocks are kept in
// power-of-two free lists and handed out again. A block that an asynchronous
// (`non_blocking=True`) copy used is not reused before that copy has run:
// the copy records its stream on the block (recordPinnedUse), and when the
// block is freed an event is recorded on each such stream; the block returns
// to the free list only once those events have completed. Queued copies
// therefore need not hold the host tensor alive.
//
// Registered as the PrivateUse1 host allocator, so
// torch.accelerator.empty_host_cache() releases the cached blocks;
// PYTORCH_ALLOC_CONF's pinned_* options apply as they do for CUDA.
#pragma once

#include <ATen/core/CachingHostAllocator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>

namespace torch_neuronx {

// The allocator (a leaked singleton: blocks may be freed during exit).
at::HostAllocator& pinnedAllocator();

// True if `ptr` points into a pinned block (in use or cached).
bool isPinnedPtr(const void* ptr);

// Marks the pinned block holding `host`'s storage as used by work queued on
// `stream`; returns false if the storage is not from the pinned allocator
// (the caller must then keep the tensor alive itself).
bool recordPinnedUse(const at::Tensor& host, const c10::Stream& stream);

// Registers the allocator as the PrivateUse1 host allocator.
void registerPinnedAllocator();

}  // namespace torch_neuronx
