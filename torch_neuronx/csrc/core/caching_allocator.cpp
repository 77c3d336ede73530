#include "core/caching_allocator.h"

#include <c10/util/Exception.h>
#include <neuron_runtime/event.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/allocator_block.h"
#include "core/allocator_snapshot.h"
#include "core/device.h"
#include "core/memory_history.h"
#include "core/out_of_memory_report.h"
#include "core/stream.h"

namespace torch_neuronx {
namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr size_t kMinBlockSize = 512;
constexpr size_t kSmallSize = 1 << 20;      // requests up to 1 MiB
constexpr size_t kSmallSegment = 2 << 20;   // are carved from 2 MiB segments
constexpr size_t kLargeRounding = 2 << 20;  // large segments: 2 MiB multiples
constexpr size_t kMinLargeRemainder = 1 << 20;

size_t roundSize(size_t n) {
  return n < kMinBlockSize
             ? kMinBlockSize
             : (n + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

using allocator::Block;

// Part of a segment whose other parts are in use: free, but the segment
// cannot go back to the runtime (CUDA's "non-releasable" memory).
bool isSplit(const Block* b) { return b->prev || b->next; }

int64_t nowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return a->ptr < b->ptr;
  }
};

// Graph pools open on any device: while none is, allocations skip the
// capture check.
std::atomic<int> g_open_graph_pools{0};

struct DeferredFree {
  Block* block;
  std::vector<neuron_rt::Event> events;
};

class DeviceCache {
 public:
  explicit DeviceCache(c10::DeviceIndex device) : device_(device) {}

  Block* allocate(size_t nbytes, c10::StreamId stream) {
    const char* op = nullptr;
    std::shared_ptr<c10::GatheredContext> ctx;
    if (recordingHistory()) {
      op = currentAllocLabel();
      ctx = gatherAllocContext();  // without our lock
    }
    // Memory allocated while the stream is capturing belongs to the graph
    // (its replays write it): see retainForGraphLocked.
    const uint64_t graph_id =
        g_open_graph_pools.load(std::memory_order_acquire) > 0
            ? runtimeDevice(device_)
                  .stream(static_cast<int>(stream))
                  .captureId()
            : 0;
    std::unique_lock<std::mutex> lk(mu_);
    processDeferredLocked();
    size_t size = roundSize(nbytes);
    bool small = size <= kSmallSize;
    auto& pool = small ? small_free_ : large_free_;
    Block* block = findFreeLocked(pool, size, stream);
    bool from_pool = false;
    if (!block) {
      size_t seg_size =
          small ? kSmallSegment
                : (size + kLargeRounding - 1) / kLargeRounding * kLargeRounding;
      block = newSegmentLocked(seg_size, stream, small);
      if (!block) {
        // Out of HBM. Queued work may still use cached segments, so wait for
        // the device (which also drops what finished work held), then give
        // every fully free cached segment back and try once more.
        stats_.num_alloc_retries++;
        lk.unlock();
        runtimeDevice(device_).synchronize();
        lk.lock();
        processDeferredLocked();
        block = findFreeLocked(pool, size, stream);
        if (block) {
          pool.erase(block);
          from_pool = true;
        } else {
          releaseCachedLocked();
          block = newSegmentLocked(seg_size, stream, small);
          // A small capacity may not fit a whole small segment.
          if (!block && small) block = newSegmentLocked(size, stream, small);
        }
      }
      if (!block) {
        stats_.num_ooms++;
        auto& hbm = runtimeDevice(device_).hbm();
        recordLocked("oom", nullptr, nbytes, stream, op, ctx,
                     hbm.capacity() - hbm.bytesInUse());
        throwOutOfMemoryLocked(nbytes);
      }
    } else {
      pool.erase(block);
      from_pool = true;
    }
    // Non-releasable accounting, one net update as CUDA does: a split block
    // taken from the pool leaves it; the remainder split off enters it.
    const size_t taken = block->size;
    const bool was_split = from_pool && isSplit(block);
    block = splitLocked(block, size, pool);
    const size_t rest = taken - block->size;
    applyInactiveSplitLocked(block->small, (rest ? 1 : 0) - (was_split ? 1 : 0),
                             static_cast<int64_t>(rest) -
                                 (was_split ? static_cast<int64_t>(taken) : 0));
    block->allocated = true;
    block->graph = graph_id;
    block->requested = nbytes;
    block->op = op;
    block->context = ctx;
    live_[block->ptr] = block;
    recordLocked("alloc", block->ptr, block->size, stream, op, std::move(ctx));
    forEachStat(block->small, [&](int t) {
      stats_.allocation[t].increase(1);
      stats_.allocated_bytes[t].increase(block->size);
      stats_.active[t].increase(1);
      stats_.active_bytes[t].increase(block->size);
      stats_.requested_bytes[t].increase(nbytes);
    });
    return block;
  }

  void free(Block* block) {
    std::vector<c10::StreamId> uses;
    std::shared_ptr<c10::GatheredContext> ctx;
    if (recordingHistory()) ctx = gatherAllocContext();  // without our lock
    {
      std::lock_guard<std::mutex> g(mu_);
      if (retainForGraphLocked(block)) return;
      recordLocked("free_requested", block->ptr, block->size, block->stream,
                   block->op, std::move(ctx));
      forEachStat(block->small, [&](int t) {
        stats_.allocation[t].decrease(1);
        stats_.allocated_bytes[t].decrease(block->size);
        stats_.requested_bytes[t].decrease(block->requested);
      });
      if (block->stream_uses.empty()) {
        live_.erase(block->ptr);
        releaseBlockLocked(block);
        return;
      }
      // Stays in live_ until it is in deferred_, so that snapshots always
      // find it (and its segment).
      uses.swap(block->stream_uses);
    }
    // Used on other streams (record_stream): reusable once each of them has
    // passed this point. The events are recorded without the lock held:
    // queueing work may release finished items, whose tensors free blocks.
    DeferredFree d{block, {}};
    for (c10::StreamId s : uses) {
      neuron_rt::Event e;
      e.record(runtimeDevice(device_).stream(static_cast<int>(s)));
      d.events.push_back(std::move(e));
    }
    std::lock_guard<std::mutex> g(mu_);
    live_.erase(block->ptr);
    deferred_.push_back(std::move(d));
  }

  // A graph's pool: from the start of its capture until the graph is
  // released, the blocks allocated during the capture are not reused when
  // their tensors die (replays still write them); CUDA's private graph pool.
  void openGraphPool(uint64_t graph) {
    std::lock_guard<std::mutex> g(mu_);
    if (graph_pools_.emplace(graph, std::vector<Block*>()).second)
      g_open_graph_pools.fetch_add(1, std::memory_order_acq_rel);
  }

  // Frees what the graph kept; its blocks still in use are freed as usual
  // when their tensors die. The caller has ordered the block's stream after
  // the graph's last replay.
  void releaseGraphPool(uint64_t graph) {
    std::vector<Block*> kept;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = graph_pools_.find(graph);
      if (it == graph_pools_.end()) return;
      kept.swap(it->second);
      graph_pools_.erase(it);
      g_open_graph_pools.fetch_sub(1, std::memory_order_acq_rel);
    }
    for (Block* b : kept) {
      b->graph = 0;
      free(b);
    }
  }

  void recordStream(void* ptr, c10::StreamId stream) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = live_.find(static_cast<char*>(ptr));
    if (it == live_.end()) return;  // not ours (e.g. a view of a freed block)
    Block* b = it->second;
    if (stream == b->stream) return;
    if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) ==
        b->stream_uses.end())
      b->stream_uses.push_back(stream);
  }

  void emptyCache() {
    std::lock_guard<std::mutex> g(mu_);
    processDeferredLocked();
    releaseCachedLocked();
  }

  // Bytes allocated and reserved now (the profiler's memory events).
  std::pair<size_t, size_t> totals() {
    std::lock_guard<std::mutex> g(mu_);
    const int t = static_cast<int>(StatType::AGGREGATE);
    return {static_cast<size_t>(stats_.allocated_bytes[t].current),
            static_cast<size_t>(reserved_)};
  }

  DeviceStats stats() {
    std::lock_guard<std::mutex> g(mu_);
    return stats_;
  }
  void resetAccumulated() {
    std::lock_guard<std::mutex> g(mu_);
    forEachStatArray([](auto& arr) {
      for (auto& s : arr) s.reset_accumulated();
    });
    stats_.num_alloc_retries = 0;
    stats_.num_ooms = 0;
    stats_.num_device_alloc = 0;
    stats_.num_device_free = 0;
  }
  void resetPeak() {
    std::lock_guard<std::mutex> g(mu_);
    forEachStatArray([](auto& arr) {
      for (auto& s : arr) s.reset_peak();
    });
  }

 private:
  template <typename F>
  void forEachStatArray(F f) {
    for (auto* arr : {&stats_.allocation, &stats_.segment, &stats_.active,
                      &stats_.inactive_split, &stats_.allocated_bytes,
                      &stats_.reserved_bytes, &stats_.active_bytes,
                      &stats_.inactive_split_bytes, &stats_.requested_bytes})
      f(*arr);
  }

  template <typename F>
  void forEachStat(bool small, F f) {
    f(static_cast<int>(StatType::AGGREGATE));
    f(static_cast<int>(small ? StatType::SMALL_POOL : StatType::LARGE_POOL));
  }

  Block* findFreeLocked(std::set<Block*, BlockOrder>& pool, size_t size,
                        c10::StreamId stream) {
    Block key{device_, stream, size, 0, nullptr, false};
    auto it = pool.lower_bound(&key);
    if (it == pool.end() || (*it)->stream != stream) return nullptr;
    // Do not carve a small request out of a very large cached block: that
    // fragments memory that a later large request would need.
    if (!(*it)->small && (*it)->size > size * 4 + (64u << 20)) return nullptr;
    return *it;
  }

  Block* newSegmentLocked(size_t seg_size, c10::StreamId stream, bool small) {
    if (seg_size > limit_ || reserved_ > limit_ - seg_size) return nullptr;
    void* p = nullptr;
    auto& hbm = runtimeDevice(device_).hbm();
    if (hbm.allocate(seg_size, &p) != neuron_rt::Status::kOk) return nullptr;
    recordLocked("segment_alloc", static_cast<char*>(p), seg_size, stream,
                 currentAllocLabel(), nullptr);
    stats_.num_device_alloc++;
    forEachStat(small, [&](int t) {
      stats_.segment[t].increase(1);
      stats_.reserved_bytes[t].increase(seg_size);
    });
    reserved_ += seg_size;
    return new Block{device_, stream, seg_size, 0, static_cast<char*>(p),
                     small};
  }

  Block* splitLocked(Block* block, size_t size,
                     std::set<Block*, BlockOrder>& pool) {
    size_t remaining = block->size - size;
    bool split = block->small ? remaining >= kMinBlockSize
                              : remaining >= kMinLargeRemainder;
    if (!split) return block;
    Block* rest = new Block{device_, block->stream,     remaining,
                            0,       block->ptr + size, block->small};
    rest->prev = block;
    rest->next = block->next;
    if (rest->next) rest->next->prev = rest;
    block->next = rest;
    block->size = size;
    pool.insert(rest);
    return block;
  }

  // Returns a block that no stream uses any more to its pool, merging it with
  // free neighbours.
  // True if the block is kept for its graph (see openGraphPool).
  bool retainForGraphLocked(Block* block) {
    if (block->graph == 0) return false;
    auto it = graph_pools_.find(block->graph);
    if (it == graph_pools_.end()) {
      block->graph = 0;
      return false;
    }
    it->second.push_back(block);
    return true;
  }

  void releaseBlockLocked(Block* block) {
    auto& pool = block->small ? small_free_ : large_free_;
    block->allocated = false;
    block->context.reset();
    recordLocked("free_completed", block->ptr, block->size, block->stream,
                 block->op, nullptr);
    block->op = nullptr;
    forEachStat(block->small, [&](int t) {
      stats_.active[t].decrease(1);
      stats_.active_bytes[t].decrease(block->size);
    });
    int64_t split_blocks = 0, split_bytes = 0;
    for (Block* nb : {block->prev, block->next}) {
      if (!nb || nb->allocated || pool.count(nb) == 0) continue;
      pool.erase(nb);
      split_blocks -= 1;  // a free neighbour always belongs to a split segment
      split_bytes -= static_cast<int64_t>(nb->size);
      if (nb == block->prev) {
        block->ptr = nb->ptr;
        block->prev = nb->prev;
        if (block->prev) block->prev->next = block;
      } else {
        block->next = nb->next;
        if (block->next) block->next->prev = block;
      }
      block->size += nb->size;
      delete nb;
    }
    if (isSplit(block)) {
      split_blocks += 1;
      split_bytes += static_cast<int64_t>(block->size);
    }
    applyInactiveSplitLocked(block->small, split_blocks, split_bytes);
    pool.insert(block);
  }

  // Free blocks of split segments (CUDA's "non-releasable" memory).
  void applyInactiveSplitLocked(bool small, int64_t blocks, int64_t bytes) {
    if (blocks == 0 && bytes == 0) return;
    forEachStat(small, [&](int t) {
      if (blocks > 0) stats_.inactive_split[t].increase(blocks);
      if (blocks < 0) stats_.inactive_split[t].decrease(-blocks);
      if (bytes > 0) stats_.inactive_split_bytes[t].increase(bytes);
      if (bytes < 0) stats_.inactive_split_bytes[t].decrease(-bytes);
    });
  }

  void recordLocked(const char* action, const char* ptr, size_t size,
                    c10::StreamId stream, const char* op,
                    std::shared_ptr<c10::GatheredContext> ctx,
                    uint64_t device_free = 0) {
    if (!recordingHistory()) return;
    size_t cap = historyMaxEntries();
    if (cap == 0) return;
    while (trace_.size() >= cap) trace_.pop_front();
    trace_.push_back(TraceEntry{action, reinterpret_cast<uint64_t>(ptr), size,
                                static_cast<int64_t>(stream), op,
                                std::move(ctx), nowUs(), device_free});
  }

  void processDeferredLocked() {
    for (auto it = deferred_.begin(); it != deferred_.end();) {
      bool done =
          std::all_of(it->events.begin(), it->events.end(),
                      [](const neuron_rt::Event& e) { return e.query(); });
      if (done) {
        releaseBlockLocked(it->block);
        it = deferred_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Frees every cached segment that is entirely unused.
  void releaseCachedLocked() {
    auto& hbm = runtimeDevice(device_).hbm();
    for (auto* pool : {&small_free_, &large_free_}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* b = *it;
        if (b->prev || b->next) {
          ++it;
          continue;
        }
        it = pool->erase(it);
        recordLocked("segment_free", b->ptr, b->size, b->stream, nullptr,
                     nullptr);
        hbm.free(b->ptr);
        stats_.num_device_free++;
        reserved_ -= b->size;
        forEachStat(b->small, [&](int t) {
          stats_.segment[t].decrease(1);
          stats_.reserved_bytes[t].decrease(b->size);
        });
        delete b;
      }
    }
  }

  [[noreturn]] void throwOutOfMemoryLocked(size_t nbytes) {
    auto& hbm = runtimeDevice(device_).hbm();
    const uint64_t capacity = hbm.capacity();
    throwOutOfMemory(OutOfMemoryFacts{
        device_, nbytes, capacity, capacity - hbm.bytesInUse(),
        static_cast<uint64_t>(
            stats_.allocated_bytes[static_cast<int>(StatType::AGGREGATE)]
                .current),
        reserved_, limit_, fraction_});
  }

 public:
  uint64_t reserved() const { return reserved_; }

  void setFraction(double fraction) {
    uint64_t capacity = runtimeDevice(device_).hbm().capacity();
    std::lock_guard<std::mutex> g(mu_);
    fraction_ = fraction;
    limit_ = fraction >= 1.0 ? std::numeric_limits<uint64_t>::max()
                             : static_cast<uint64_t>(fraction * capacity);
  }
  double fraction() {
    std::lock_guard<std::mutex> g(mu_);
    return fraction_;
  }

  std::vector<SegmentSnapshot> snapshot() {
    std::lock_guard<std::mutex> g(mu_);
    std::vector<const Block*> blocks;
    std::unordered_set<const Block*> pending;
    for (auto& kv : live_) blocks.push_back(kv.second);
    for (Block* b : small_free_) blocks.push_back(b);
    for (Block* b : large_free_) blocks.push_back(b);
    for (const DeferredFree& d : deferred_) {
      blocks.push_back(d.block);
      pending.insert(d.block);
    }
    return segmentSnapshots(device_, blocks, pending);
  }

  std::vector<TraceEntry> trace() {
    std::lock_guard<std::mutex> g(mu_);
    return {trace_.begin(), trace_.end()};
  }
  void clearTrace() {
    std::lock_guard<std::mutex> g(mu_);
    trace_.clear();
  }

 private:
  c10::DeviceIndex device_;
  std::mutex mu_;
  std::set<Block*, BlockOrder> small_free_;
  std::set<Block*, BlockOrder> large_free_;
  std::unordered_map<char*, Block*> live_;
  std::vector<DeferredFree> deferred_;
  std::unordered_map<uint64_t, std::vector<Block*>> graph_pools_;
  DeviceStats stats_;
  uint64_t reserved_ = 0;
  // Per-process cap on reserved_ (set_per_process_memory_fraction).
  uint64_t limit_ = std::numeric_limits<uint64_t>::max();
  double fraction_ = 1.0;
  std::deque<TraceEntry> trace_;
};

std::mutex g_caches_mu;
std::vector<std::unique_ptr<DeviceCache>> g_caches;

DeviceCache& cacheFor(c10::DeviceIndex device) {
  checkDeviceIndex(device);
  std::lock_guard<std::mutex> g(g_caches_mu);
  if (g_caches.size() <= static_cast<size_t>(device))
    g_caches.resize(device + 1);
  if (!g_caches[device])
    g_caches[device] = std::make_unique<DeviceCache>(device);
  return *g_caches[device];
}

// torch.profiler(profile_memory=True): each allocation and free, with the
// device's totals after it, as CUDA's allocator reports them.
void reportToProfiler(void* ptr, int64_t bytes, c10::DeviceIndex device) {
  auto [allocated, reserved] = cacheFor(device).totals();
  c10::reportMemoryUsageToProfiler(ptr, bytes, allocated, reserved,
                                   neuronDevice(device));
}

void deleteBlock(void* ctx) {
  Block* b = static_cast<Block*>(ctx);
  if (c10::memoryProfilingEnabled()) {
    void* ptr = b->ptr;
    const int64_t size = static_cast<int64_t>(b->size);
    const c10::DeviceIndex device = b->device;
    cacheFor(device).free(b);
    reportToProfiler(ptr, -size, device);
    return;
  }
  cacheFor(b->device).free(b);
}

}  // namespace

c10::DataPtr CachingAllocator::allocateOn(c10::DeviceIndex device,
                                          size_t nbytes) {
  if (nbytes == 0) return c10::DataPtr(nullptr, neuronDevice(device));
  c10::StreamId stream = currentStream(device).id();
  Block* b = cacheFor(device).allocate(nbytes, stream);
  if (c10::memoryProfilingEnabled())
    reportToProfiler(b->ptr, static_cast<int64_t>(b->size), device);
  return c10::DataPtr(b->ptr, b, &deleteBlock, neuronDevice(device));
}

c10::DataPtr CachingAllocator::allocate(size_t nbytes) {
  return allocateOn(currentDevice(), nbytes);
}

c10::DeleterFnPtr CachingAllocator::raw_deleter() const { return nullptr; }

void CachingAllocator::copy_data(void* dest, const void* src,
                                 std::size_t count) const {
  // Device-to-device copy of raw storage (Allocator::clone); run as a work
  // item so it is ordered with the work that produced `src`.
  c10::DeviceIndex dev = currentDevice();
  launch(
      dev, "storage_copy", [=] { std::memcpy(dest, src, count); },
      neuron_rt::ItemKind::kCopy);
}

bool CachingAllocator::initialized() {
  return neuron_rt::Runtime::initialized();
}

void CachingAllocator::openGraphPool(c10::DeviceIndex device, uint64_t graph) {
  cacheFor(device).openGraphPool(graph);
}

void CachingAllocator::releaseGraphPool(c10::DeviceIndex device,
                                        uint64_t graph) {
  cacheFor(device).releaseGraphPool(graph);
}

void CachingAllocator::emptyCache(c10::MempoolId_t) {
  if (!neuron_rt::Runtime::initialized()) return;
  const DeviceNumbering own = deviceNumbering();
  for (int i = own.first; i < own.first + own.count; ++i) {
    const auto d = static_cast<c10::DeviceIndex>(i);
    // Blocks of in-flight work are released only once that work has run.
    runtimeDevice(d).synchronize();
    cacheFor(d).emptyCache();
  }
}

void CachingAllocator::recordStream(const c10::DataPtr& ptr,
                                    c10::Stream stream) {
  if (!ptr.get() || ptr.get_deleter() != &deleteBlock) return;
  Block* b = static_cast<Block*>(ptr.get_context());
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "record_stream: expected a neuron stream, got ", stream);
  cacheFor(b->device).recordStream(ptr.get(), stream.id());
}

DeviceStats CachingAllocator::getDeviceStats(c10::DeviceIndex device) {
  return cacheFor(device).stats();
}

void CachingAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  cacheFor(device).resetAccumulated();
}

void CachingAllocator::resetPeakStats(c10::DeviceIndex device) {
  cacheFor(device).resetPeak();
}

std::pair<size_t, size_t> CachingAllocator::getMemoryInfo(
    c10::DeviceIndex device) {
  auto& hbm = runtimeDevice(device).hbm();
  return {hbm.capacity() - hbm.bytesInUse(), hbm.capacity()};
}

void CachingAllocator::setMemoryFraction(double fraction,
                                         c10::DeviceIndex device) {
  TORCH_CHECK_VALUE(fraction > 0.0 && fraction <= 1.0,
                    "Invalid fraction value: ", fraction,
                    ". Allowed range: (0, 1]");
  cacheFor(device).setFraction(fraction);
}

double CachingAllocator::getMemoryFraction(c10::DeviceIndex device) {
  return cacheFor(device).fraction();
}

std::vector<SegmentSnapshot> CachingAllocator::snapshot() {
  std::vector<DeviceCache*> caches;
  {
    std::lock_guard<std::mutex> g(g_caches_mu);
    for (auto& c : g_caches)
      if (c) caches.push_back(c.get());
  }
  std::vector<SegmentSnapshot> out;
  for (DeviceCache* c : caches) {
    auto segs = c->snapshot();
    std::move(segs.begin(), segs.end(), std::back_inserter(out));
  }
  return out;
}

std::vector<TraceEntry> CachingAllocator::trace(c10::DeviceIndex device) {
  return cacheFor(device).trace();
}

void CachingAllocator::recordHistory(bool enabled, bool python_stacks,
                                     size_t max_entries) {
  setRecordHistory(enabled, python_stacks, max_entries);
  std::lock_guard<std::mutex> g(g_caches_mu);
  for (auto& c : g_caches)
    if (c) c->clearTrace();
}

CachingAllocator& cachingAllocator() {
  static CachingAllocator* a = new CachingAllocator();
  return *a;
}

}  // namespace torch_neuronx
