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

#include <string>

namespace torch_neuronx {

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

  // Allocates on `device` for use on its current stream.
  c10::DataPtr allocateOn(c10::DeviceIndex device, size_t nbytes);
};

CachingAllocator& cachingAllocator();

// Human-readable formatting used in out-of-memory messages.
std::string formatBytes(uint64_t bytes);

}  // namespace torch_neuronx
