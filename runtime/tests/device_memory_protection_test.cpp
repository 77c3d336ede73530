// Device memory the host cannot read by accident: with protection on, an
// arena is inaccessible outside device work, and a host access faults with a
// message naming it.
#include "neuron_runtime/device_memory_protection.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>

#include "neuron_runtime/hbm_arena.h"
#include "neuron_runtime/status.h"
#include "neuron_runtime/stream.h"
#include "test_util.h"

namespace neuron_rt {
namespace {

using neuron_rt_test::ThrowsError;

constexpr const char* kFaultMessage =
    "host access to neuron device memory at 0x[0-9a-f]+ \\(missing "
    "synchronize\\?";

int readByte(const void* p) { return *static_cast<const volatile char*>(p); }

// Protection on for the test's arenas, off again after them.
class Protected : public ::testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    setDeviceMemoryProtection(true);
    arena_ = std::make_unique<HbmArena>(0, 64 << 20);
    ASSERT_EQ(arena_->allocate(4096, &ptr_), Status::kOk);
  }
  void TearDown() override {
    arena_.reset();
    setDeviceMemoryProtection(false);
  }
  std::unique_ptr<HbmArena> arena_;
  void* ptr_ = nullptr;
};

TEST_F(Protected, AHostReadOutsideDeviceWorkFaultsWithAMessage) {
  EXPECT_FALSE(DeviceMemoryAccess::isOpen());
  EXPECT_TRUE(inProtectedArena(ptr_));
  EXPECT_FALSE(inProtectedArena(&ptr_));
  EXPECT_DEATH(readByte(ptr_), kFaultMessage);
}

TEST_F(Protected, AccessIsOpenWhileAnyAccessExistsInAnyThread) {
  {
    DeviceMemoryAccess access;
    std::memset(ptr_, 7, 4096);
    EXPECT_EQ(readByte(static_cast<char*>(ptr_) + 100), 7);
    // A second opening (another thread) and its end leave it open.
    std::thread([&] {
      DeviceMemoryAccess other;
      EXPECT_EQ(readByte(ptr_), 7);
    }).join();
    EXPECT_TRUE(DeviceMemoryAccess::isOpen());
    EXPECT_EQ(readByte(ptr_), 7);
  }
  EXPECT_FALSE(DeviceMemoryAccess::isOpen());
  EXPECT_DEATH(readByte(ptr_), kFaultMessage);
}

TEST_F(Protected, AnArenaMadeWhileAccessIsOpenIsOpenUntilItCloses) {
  DeviceMemoryAccess::open();
  HbmArena second(1, 8 << 20);
  void* p = nullptr;
  ASSERT_EQ(second.allocate(64, &p), Status::kOk);
  std::memset(p, 1, 64);
  DeviceMemoryAccess::close();
  EXPECT_DEATH(readByte(p), kFaultMessage);
}

TEST_F(Protected, StreamWorkReadsAndWritesAndTheHostFaultsAfterSynchronize) {
  Stream s(0, 1, 0, nullptr);
  std::atomic<int> seen{0};
  char* p = static_cast<char*>(ptr_);
  for (int i = 0; i < 100; ++i)
    s.enqueue("write", [p, i] { p[i] = static_cast<char>(i); });
  s.enqueue("read", [p, &seen] { seen = p[99]; });
  s.synchronize();
  EXPECT_EQ(seen.load(), 99);
  EXPECT_FALSE(s.takeError().has_value());
  EXPECT_FALSE(DeviceMemoryAccess::isOpen());  // closed once the queue ran dry
  EXPECT_DEATH(readByte(p + 5), kFaultMessage);
}

TEST_F(Protected, ModeCannotChangeWhileDeviceMemoryExists) {
  EXPECT_TRUE(ThrowsError([] { setDeviceMemoryProtection(false); },
                          Status::kInvalidArgument, {"no device memory"}));
  EXPECT_TRUE(deviceMemoryProtected());
}

TEST(DeviceMemoryProtectionTest, OffByDefaultTheHostCanReadAsBefore) {
  setDeviceMemoryProtection(false);
  HbmArena arena(0, 8 << 20);
  void* p = nullptr;
  ASSERT_EQ(arena.allocate(64, &p), Status::kOk);
  std::memset(p, 3, 64);
  EXPECT_EQ(readByte(p), 3);
  EXPECT_FALSE(inProtectedArena(p));
}

}  // namespace
}  // namespace neuron_rt
