#include "core/allocator_snapshot.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace torch_neuronx {

using allocator::Block;

std::vector<SegmentSnapshot> segmentSnapshots(
    c10::DeviceIndex device, const std::vector<const Block*>& blocks,
    const std::unordered_set<const Block*>& pending_free) {
  // A segment starts at the block without a predecessor.
  std::vector<const Block*> heads;
  for (const Block* b : blocks)
    if (!b->prev) heads.push_back(b);
  std::sort(heads.begin(), heads.end(),
            [](const Block* a, const Block* b) { return a->ptr < b->ptr; });
  std::vector<SegmentSnapshot> out;
  for (const Block* head : heads) {
    SegmentSnapshot seg{static_cast<int>(device),
                        reinterpret_cast<uint64_t>(head->ptr),
                        0,
                        0,
                        0,
                        0,
                        static_cast<int64_t>(head->stream),
                        head->small,
                        {}};
    for (const Block* b = head; b; b = b->next) {
      bool held = pending_free.count(b) > 0;  // freed, other streams pending
      const char* state = held           ? "active_pending_free"
                          : b->allocated ? "active_allocated"
                                         : "inactive";
      seg.total_size += b->size;
      if (b->allocated && !held) {
        seg.allocated_size += b->size;
        seg.requested_size += b->requested;
      }
      if (b->allocated) seg.active_size += b->size;
      seg.blocks.push_back(BlockSnapshot{
          reinterpret_cast<uint64_t>(b->ptr), b->size,
          b->allocated ? b->requested : 0, state, b->op, b->context});
    }
    out.push_back(std::move(seg));
  }
  return out;
}

}  // namespace torch_neuronx
