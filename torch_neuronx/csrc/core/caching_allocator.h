// The device caching allocator: caches blocks of each device's HBM per
// stream, so that steady-state training allocates nothing from the runtime.
//
// Blocks are served from segments that the runtime's HBM arena hands out.
// A freed block becomes reusable by later work on the stream it was allocated
// on (stream order makes that safe); blocks used on other streams
// (Tensor.record_stream) are held back until those streams have passed an
// event recorded at free time.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Stream.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace torch_neuronx {

// One block of a segment as a memory snapshot shows it (CUDA's layout).
struct BlockSnapshot {
  uint64_t address;
  size_t size;
  size_t requested_size;
  // "active_allocated", "active_pending_free" (freed, held back for another
  // stream's use) or "inactive" (free, cached).
  const char* state;
  const char* op;  // the work that allocated it (nullptr: unknown)
  std::shared_ptr<c10::GatheredContext> context;  // its Python stack
};

// One contiguous piece of HBM obtained from the runtime.
struct SegmentSnapshot {
  int device;
  uint64_t address;
  size_t total_size;
  size_t allocated_size;
  size_t active_size;
  size_t requested_size;
  int64_t stream;
  bool small;
  std::vector<BlockSnapshot> blocks;
};

// One event of the allocation history (recorded only while it is on).
struct TraceEntry {
  // "alloc", "free_requested", "free_completed", "segment_alloc",
  // "segment_free" or "oom".
  const char* action;
  uint64_t address;
  size_t size;
  int64_t stream;
  const char* op;
  std::shared_ptr<c10::GatheredContext> context;
  int64_t time_us;
  uint64_t device_free = 0;  // "oom" only: free HBM at the time
};

class CachingAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  bool initialized() override;
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(
      c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  // The private pool of graph `graph` (torch.neuron.NeuronGraph): blocks
  // allocated on a stream while it captures that graph stay the graph's
  // until releaseGraphPool, even when their tensors die.
  void openGraphPool(c10::DeviceIndex device, uint64_t graph);
  void releaseGraphPool(c10::DeviceIndex device, uint64_t graph);

  // Allocates on `device` for use on its current stream.
  c10::DataPtr allocateOn(c10::DeviceIndex device, size_t nbytes);

  // Caps what this process may reserve on `device` at fraction * capacity
  // (torch.neuron.set_per_process_memory_fraction); fraction in (0, 1].
  void setMemoryFraction(double fraction, c10::DeviceIndex device);
  double getMemoryFraction(c10::DeviceIndex device);

  // Every segment of every device in use, with its blocks.
  std::vector<SegmentSnapshot> snapshot();
  // The recorded allocation history of `device`, oldest first.
  std::vector<TraceEntry> trace(c10::DeviceIndex device);
  // Starts (or stops) recording history, dropping what was recorded.
  void recordHistory(bool enabled, bool python_stacks, size_t max_entries);
};

CachingAllocator& cachingAllocator();

}  // namespace torch_neuronx
