// The device caching allocator (core/caching_allocator.h) as the backend's
// tensors use it: freed blocks are reused on their stream, statistics follow
// allocations, emptyCache returns cached segments, a request beyond the
// device's memory raises the out-of-memory error with its figures.
#include "core/caching_allocator.h"

#include <ATen/ATen.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <gtest/gtest.h>
#include <torch_neuronx/neuron.h>

#include <string>

namespace {

using torch_neuronx::cachingAllocator;
using torch_neuronx::kNeuron;

class CachingAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    torch_neuronx::init();
    torch_neuronx::deviceSynchronize();
    cachingAllocator().emptyCache();
  }
  c10::CachingDeviceAllocator::DeviceStats stats() {
    return cachingAllocator().getDeviceStats(0);
  }
};

constexpr size_t kAll =
    static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

TEST_F(CachingAllocatorTest, AFreedBlockIsReusedOnItsStream) {
  void* first = nullptr;
  {
    at::Tensor t = at::empty({1 << 18}, at::device(kNeuron));
    first = t.data_ptr();
  }
  at::Tensor again = at::empty({1 << 18}, at::device(kNeuron));
  EXPECT_EQ(again.data_ptr(), first);
}

TEST_F(CachingAllocatorTest, StatisticsFollowAllocations) {
  const int64_t before = stats().allocated_bytes[kAll].current;
  {
    at::Tensor t = at::empty({1024}, at::device(kNeuron).dtype(at::kFloat));
    EXPECT_GE(stats().allocated_bytes[kAll].current, before + 4096);
    EXPECT_GE(stats().allocated_bytes[kAll].peak, before + 4096);
  }
  EXPECT_EQ(stats().allocated_bytes[kAll].current, before);
  // The block stays cached (reserved) until the cache is emptied.
  EXPECT_GT(stats().reserved_bytes[kAll].current, 0);
  torch_neuronx::deviceSynchronize();
  cachingAllocator().emptyCache();
  EXPECT_EQ(stats().reserved_bytes[kAll].current,
            stats().allocated_bytes[kAll].current);
}

TEST_F(CachingAllocatorTest, OutOfMemoryNamesTheRequest) {
  const auto [free_bytes, total] = cachingAllocator().getMemoryInfo(0);
  ASSERT_GT(total, 0u);
  const int64_t too_many = static_cast<int64_t>(total / 4 + (1 << 20));
  try {
    at::Tensor t = at::empty({too_many}, at::device(kNeuron).dtype(at::kFloat));
    FAIL() << "allocated " << too_many * 4 << " bytes of " << total;
  } catch (const c10::OutOfMemoryError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("out of memory"), std::string::npos) << what;
    EXPECT_NE(what.find("Tried to allocate"), std::string::npos) << what;
  }
  // Nothing is lost: the device still allocates.
  at::Tensor ok = at::ones({16}, at::device(kNeuron));
  EXPECT_EQ(ok.sum().item<float>(), 16.0f);
  (void)free_bytes;
}

}  // namespace
