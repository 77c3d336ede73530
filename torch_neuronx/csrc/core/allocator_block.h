// The caching allocator's unit: one block of a segment of HBM. Private to
// the allocator's files (caching_allocator.cpp, which owns the blocks, and
// allocator_snapshot.cpp, which reads them).
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Stream.h>

#include <cstddef>
#include <memory>
#include <vector>

namespace torch_neuronx {
namespace allocator {

struct Block {
  c10::DeviceIndex device;
  c10::StreamId stream;
  size_t size;
  size_t requested = 0;
  char* ptr;
  bool small;
  bool allocated = false;
  Block* prev = nullptr;  // neighbours in the same segment
  Block* next = nullptr;
  std::vector<c10::StreamId> stream_uses;  // other streams (record_stream)
  const char* op = nullptr;                // what allocated it (snapshots)
  uint64_t graph = 0;  // the capture it was allocated in (0: none)
  std::shared_ptr<c10::GatheredContext> context;  // only while recording
};

}  // namespace allocator
}  // namespace torch_neuronx
