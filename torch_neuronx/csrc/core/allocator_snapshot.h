// A memory snapshot's segments (torch.neuron.memory_snapshot, in CUDA's
// layout), read from the caching allocator's blocks.
#pragma once

#include <c10/core/Device.h>

#include <unordered_set>
#include <vector>

#include "core/allocator_block.h"
#include "core/caching_allocator.h"

namespace torch_neuronx {

// The segments of `device` that `blocks` belong to, by address, each with
// all its blocks in order. `blocks`: every block the device's cache holds
// (in use, free or held back); `pending_free`: those freed but held back
// for another stream's use. The caller holds the cache's lock: the walk
// follows the blocks' neighbours.
std::vector<SegmentSnapshot> segmentSnapshots(
    c10::DeviceIndex device, const std::vector<const allocator::Block*>& blocks,
    const std::unordered_set<const allocator::Block*>& pending_free);

}  // namespace torch_neuronx
