#include "neuron_runtime/hbm_arena.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "neuron_runtime/status.h"
#include "test_util.h"

namespace neuron_rt {
namespace {

using neuron_rt_test::ThrowsError;

constexpr uint64_t kPage = HbmArena::kAlignment;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kTiB = 1ull << 40;

// Resident set size of this process, in bytes.
uint64_t residentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

void* mustAllocate(HbmArena& arena, size_t bytes) {
  void* p = nullptr;
  Status st = arena.allocate(bytes, &p);
  EXPECT_EQ(st, Status::kOk) << "allocating " << bytes << " bytes";
  return p;
}

TEST(HbmArenaTest, AllocateAndFree) {
  HbmArena arena(3, kMiB);
  EXPECT_EQ(arena.device(), 3);
  EXPECT_EQ(arena.capacity(), kMiB);
  EXPECT_EQ(arena.bytesInUse(), 0u);
  EXPECT_EQ(arena.largestFreeRange(), kMiB);

  void* p = nullptr;
  ASSERT_EQ(arena.allocate(100, &p), Status::kOk);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(arena.contains(p));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % HbmArena::kAlignment, 0u);
  EXPECT_EQ(arena.bytesInUse(), kPage);  // rounded up to the alignment
  std::memset(p, 0xab, 100);             // the memory is usable

  arena.free(p);
  EXPECT_EQ(arena.bytesInUse(), 0u);
  EXPECT_EQ(arena.largestFreeRange(), kMiB);
}

TEST(HbmArenaTest, CapacityIsRoundedUpToAlignment) {
  HbmArena arena(0, kPage + 1);
  EXPECT_EQ(arena.capacity(), 2 * kPage);
}

TEST(HbmArenaTest, ZeroByteAllocationGetsAPage) {
  HbmArena arena(0, kMiB);
  void* p = mustAllocate(arena, 0);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(arena.bytesInUse(), kPage);
  arena.free(p);
  EXPECT_EQ(arena.bytesInUse(), 0u);
}

TEST(HbmArenaTest, AllocationsAreDistinctAndDoNotOverlap) {
  HbmArena arena(0, kMiB);
  std::vector<char*> ptrs;
  for (int i = 0; i < 16; ++i) {
    char* p = static_cast<char*>(mustAllocate(arena, kPage + 1));  // 2 pages
    ASSERT_NE(p, nullptr);
    std::memset(p, i, kPage + 1);
    ptrs.push_back(p);
  }
  EXPECT_EQ(arena.bytesInUse(), 16 * 2 * kPage);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(ptrs[i][0], static_cast<char>(i));
    EXPECT_EQ(ptrs[i][kPage], static_cast<char>(i));
    for (int j = 0; j < 16; ++j) {
      if (i == j) continue;
      bool disjoint =
          ptrs[i] + 2 * kPage <= ptrs[j] || ptrs[j] + 2 * kPage <= ptrs[i];
      EXPECT_TRUE(disjoint) << i << " overlaps " << j;
    }
  }
  for (char* p : ptrs) arena.free(p);
  EXPECT_EQ(arena.bytesInUse(), 0u);
}

TEST(HbmArenaTest, ContainsOnlyTheArenaRange) {
  HbmArena arena(0, 4 * kPage);
  char* p = static_cast<char*>(mustAllocate(arena, kPage));
  int on_stack = 0;
  EXPECT_TRUE(arena.contains(p));
  EXPECT_FALSE(arena.contains(&on_stack));
  EXPECT_FALSE(arena.contains(nullptr));
  arena.free(p);
}

TEST(HbmArenaTest, ExhaustionReturnsOutOfMemoryAndRecovers) {
  HbmArena arena(0, 16 * kPage);
  std::vector<void*> ptrs;
  for (int i = 0; i < 16; ++i) ptrs.push_back(mustAllocate(arena, kPage));
  EXPECT_EQ(arena.bytesInUse(), 16 * kPage);
  EXPECT_EQ(arena.largestFreeRange(), 0u);

  // Full: a status, not an abort, and the out-parameter is left untouched.
  void* sentinel = reinterpret_cast<void*>(0x1234);
  void* out = sentinel;
  EXPECT_EQ(arena.allocate(1, &out), Status::kOutOfMemory);
  EXPECT_EQ(out, sentinel);
  EXPECT_EQ(arena.bytesInUse(), 16 * kPage);

  // After a free, allocation works again (and reuses the freed range).
  void* freed = ptrs[7];
  arena.free(freed);
  ptrs.erase(ptrs.begin() + 7);
  void* again = nullptr;
  ASSERT_EQ(arena.allocate(kPage, &again), Status::kOk);
  EXPECT_EQ(again, freed);
  ptrs.push_back(again);
  EXPECT_EQ(arena.allocate(kPage, &out), Status::kOutOfMemory);

  for (void* p : ptrs) arena.free(p);
  EXPECT_EQ(arena.bytesInUse(), 0u);
  void* all = nullptr;
  EXPECT_EQ(arena.allocate(16 * kPage, &all), Status::kOk);
  arena.free(all);
}

TEST(HbmArenaTest, OversizedRequestsReturnOutOfMemory) {
  HbmArena arena(0, 4 * kPage);
  void* sentinel = reinterpret_cast<void*>(0x1234);
  void* out = sentinel;
  EXPECT_EQ(arena.allocate(4 * kPage + 1, &out), Status::kOutOfMemory);
  EXPECT_EQ(arena.allocate(kTiB, &out), Status::kOutOfMemory);
  // Sizes whose rounding overflows size_t.
  EXPECT_EQ(arena.allocate(std::numeric_limits<size_t>::max(), &out),
            Status::kOutOfMemory);
  EXPECT_EQ(arena.allocate(std::numeric_limits<size_t>::max() - kPage, &out),
            Status::kOutOfMemory);
  EXPECT_EQ(out, sentinel);
  EXPECT_EQ(arena.bytesInUse(), 0u);
  // Exactly the capacity fits.
  void* p = nullptr;
  ASSERT_EQ(arena.allocate(4 * kPage, &p), Status::kOk);
  arena.free(p);
}

// Allocates A, B, C filling the arena exactly, frees them in `order`, and
// checks that a single allocation of the whole capacity then succeeds.
void checkCoalescing(const std::vector<int>& order) {
  const uint64_t sizes[3] = {1 * kPage, 2 * kPage, 3 * kPage};
  HbmArena arena(0, 6 * kPage);
  void* ptrs[3];
  for (int i = 0; i < 3; ++i) ptrs[i] = mustAllocate(arena, sizes[i]);
  void* out = nullptr;
  ASSERT_EQ(arena.allocate(1, &out), Status::kOutOfMemory);
  for (int i : order) arena.free(ptrs[i]);
  EXPECT_EQ(arena.bytesInUse(), 0u);
  EXPECT_EQ(arena.largestFreeRange(), 6 * kPage);
  void* all = nullptr;
  ASSERT_EQ(arena.allocate(6 * kPage, &all), Status::kOk);
  EXPECT_TRUE(arena.contains(all));
  arena.free(all);
}

TEST(HbmArenaTest, CoalescesFreedNeighboursInAnyOrder) {
  std::vector<std::vector<int>> orders = {{0, 1, 2}, {2, 1, 0}, {0, 2, 1},
                                          {1, 0, 2}, {1, 2, 0}, {2, 0, 1}};
  for (const auto& order : orders) {
    SCOPED_TRACE(::testing::Message()
                 << "free order " << order[0] << order[1] << order[2]);
    checkCoalescing(order);
  }
}

TEST(HbmArenaTest, DoesNotCoalesceAcrossALiveAllocation) {
  HbmArena arena(0, 6 * kPage);
  void* a = mustAllocate(arena, 2 * kPage);
  void* b = mustAllocate(arena, 2 * kPage);
  void* c = mustAllocate(arena, 2 * kPage);
  arena.free(a);
  arena.free(c);
  // 4 pages are free, but in two separate 2-page ranges.
  EXPECT_EQ(arena.largestFreeRange(), 2 * kPage);
  void* out = nullptr;
  EXPECT_EQ(arena.allocate(3 * kPage, &out), Status::kOutOfMemory);
  arena.free(b);
  ASSERT_EQ(arena.allocate(6 * kPage, &out), Status::kOk);
  arena.free(out);
}

TEST(HbmArenaTest, TerabyteArenaReservesAddressSpaceOnly) {
  const uint64_t before = residentBytes();
  ASSERT_GT(before, 0u);
  HbmArena arena(0, kTiB);
  EXPECT_EQ(arena.capacity(), kTiB);
  // Creating the arena and carving the whole range out of it touches no
  // pages.
  void* whole = mustAllocate(arena, kTiB);
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(arena.bytesInUse(), kTiB);
  EXPECT_LT(residentBytes(), before + 64 * kMiB);
  arena.free(whole);

  // Only the pages that are written cost RAM, and freeing gives them back.
  const uint64_t touched = 64 * kMiB;
  char* p = static_cast<char*>(mustAllocate(arena, kGiB));
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, touched);
  const uint64_t after_touch = residentBytes();
  EXPECT_GE(after_touch, before + touched / 2);
  arena.free(p);
  EXPECT_LT(residentBytes(), after_touch - touched / 2);
}

TEST(HbmArenaTest, BadFreeThrows) {
  HbmArena arena(2, 8 * kPage);
  HbmArena other(5, 8 * kPage);
  char* p = static_cast<char*>(mustAllocate(arena, 2 * kPage));
  char* q = static_cast<char*>(mustAllocate(other, kPage));
  int on_stack = 0;

  // A pointer that was never allocated (interior, foreign, unrelated).
  EXPECT_TRUE(ThrowsError([&] { arena.free(p + kPage); },
                          Status::kInvalidArgument, {"neuron:2"}));
  EXPECT_TRUE(
      ThrowsError([&] { arena.free(p + 1); }, Status::kInvalidArgument));
  EXPECT_TRUE(ThrowsError([&] { arena.free(q); }, Status::kInvalidArgument));
  EXPECT_TRUE(
      ThrowsError([&] { arena.free(&on_stack); }, Status::kInvalidArgument));
  // A failed free changes nothing.
  EXPECT_EQ(arena.bytesInUse(), 2 * kPage);

  arena.free(p);
  // Double free.
  EXPECT_TRUE(ThrowsError([&] { arena.free(p); }, Status::kInvalidArgument));
  EXPECT_EQ(arena.bytesInUse(), 0u);
  EXPECT_EQ(arena.largestFreeRange(), 8 * kPage);

  arena.free(nullptr);  // a no-op, like ::free
  other.free(q);
}

TEST(HbmArenaTest, ConcurrentAllocateAndFree) {
  HbmArena arena(0, 256 * kPage);
  auto worker = [&arena](int seed) {
    std::vector<void*> mine;
    for (int i = 0; i < 2000; ++i) {
      if (mine.size() < 8 && ((i + seed) % 3 != 0)) {
        void* p = nullptr;
        if (arena.allocate(((i + seed) % 4 + 1) * kPage, &p) == Status::kOk)
          mine.push_back(p);
      } else if (!mine.empty()) {
        arena.free(mine.back());
        mine.pop_back();
      }
    }
    for (void* p : mine) arena.free(p);
  };
  std::thread t1(worker, 0), t2(worker, 1);
  t1.join();
  t2.join();
  EXPECT_EQ(arena.bytesInUse(), 0u);
  EXPECT_EQ(arena.largestFreeRange(), 256 * kPage);
}

}  // namespace
}  // namespace neuron_rt
