#include "core/pinned_allocator.h"

#include <c10/util/Exception.h>
#include <neuron_runtime/event.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "core/stream.h"

namespace torch_neuronx {
namespace {

// Every pinned block (in use or cached): start -> size, for isPinnedPtr,
// which must also answer for pointers inside a block (views).
std::mutex g_blocks_mu;
std::map<const char*, size_t> g_blocks;

using Block = at::HostBlock<c10::Stream>;

// The runtime-specific half of the caching host allocator: how host memory
// is obtained and released, and the stream events that keep a block from
// being reused while queued copies may still touch it.
struct PinnedAllocatorImpl final
    : public at::CachingHostAllocatorImpl<c10::Stream, neuron_rt::Event> {
  void copy_data(void* dest, const void* src,
                 std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

 private:
  void allocate_host_memory(size_t size, void** ptr) override {
    auto start = std::chrono::steady_clock::now();
    // Page alignment, as page-locked memory has.
    TORCH_CHECK_WITH(OutOfMemoryError, posix_memalign(ptr, 4096, size) == 0,
                     "could not allocate ", size,
                     " bytes of pinned host memory");
    {
      std::lock_guard<std::mutex> g(g_blocks_mu);
      g_blocks[static_cast<const char*>(*ptr)] = size;
    }
    recordTime(stats_.host_alloc_time, start);
  }

  void free_block(Block* block) override {
    auto start = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> g(g_blocks_mu);
      g_blocks.erase(static_cast<const char*>(block->ptr_));
    }
    std::free(block->ptr_);
    recordTime(stats_.host_free_time, start);
  }

  // Called at free time for each stream the block was used on: the event
  // completes after everything queued on the stream so far, the copies that
  // read or write the block included.
  void record_stream(std::optional<std::vector<neuron_rt::Event>>& events,
                     c10::Stream stream) override {
    neuron_rt::Event event;
    try {
      event.record(runtimeStream(stream));
    } catch (...) {
      // A deleter must not throw (e.g. in a forked child whose runtime is
      // gone). Without its event the block is never reused: a leak, but
      // never an early reuse.
      return;
    }
    events->push_back(std::move(event));
  }

  bool query_event(neuron_rt::Event& event) override { return event.query(); }

  c10::Stream get_current_stream() const override {
    // Only asked while a private pool is being captured into; the backend
    // has no graph capture, so any stream of the current device will do.
    return defaultStream(0);
  }

  bool stream_is_capturing(c10::Stream) const override { return false; }

  void recordTime(c10::CachingAllocator::DurationStat& stat,
                  std::chrono::steady_clock::time_point start) {
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count();
    std::lock_guard<std::mutex> g(stats_.timing_mutex_);
    stat.increase(us);
  }
};

void deletePinned(void* ctx);

struct PinnedAllocator final
    : public at::CachingHostAllocatorInterface<PinnedAllocatorImpl,
                                               &deletePinned> {};

PinnedAllocator* g_allocator = new PinnedAllocator();

void deletePinned(void* ctx) { g_allocator->free(ctx); }

}  // namespace

at::HostAllocator& pinnedAllocator() { return *g_allocator; }

bool isPinnedPtr(const void* ptr) {
  const char* p = static_cast<const char*>(ptr);
  std::lock_guard<std::mutex> g(g_blocks_mu);
  auto it = g_blocks.upper_bound(p);
  if (it == g_blocks.begin()) return false;
  --it;
  return p >= it->first && p < it->first + it->second;
}

bool recordPinnedUse(const at::Tensor& host, const c10::Stream& stream) {
  const c10::DataPtr& dp = host.storage().data_ptr();
  if (dp.get_deleter() != &deletePinned) return false;
  return g_allocator->record_event(dp.get(), dp.get_context(), stream);
}

void registerPinnedAllocator() {
  at::setHostAllocator(c10::DeviceType::PrivateUse1, g_allocator);
}

}  // namespace torch_neuronx
