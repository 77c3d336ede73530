#include "neuron_runtime/runtime.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "neuron_runtime/device.h"
#include "neuron_runtime/event.h"
#include "neuron_runtime/status.h"
#include "neuron_runtime/trace.h"
#include "test_util.h"

namespace neuron_rt {
namespace {

using neuron_rt_test::EnvGuard;
using neuron_rt_test::Gate;
using neuron_rt_test::runtimeEnvVars;
using neuron_rt_test::ThrowsError;

constexpr uint64_t kMiB = 1ull << 20;

CoreInfo smallCore(int index) { return CoreInfo{index, index, 0, 4 * kMiB}; }

TopologyConfig smallConfig(std::vector<int> visible) {
  TopologyConfig c;
  c.hbm_bytes_per_core = 4 * kMiB;
  c.visible_cores = std::move(visible);
  return c;
}

// ---------------------------------------------------------------------------
// Status

TEST(StatusTest, NamesAndError) {
  EXPECT_STREQ(statusName(Status::kOk), "ok");
  EXPECT_STREQ(statusName(Status::kOutOfMemory), "out of memory");
  EXPECT_STREQ(statusName(Status::kInvalidArgument), "invalid argument");
  EXPECT_STREQ(statusName(Status::kInvalidConfig), "invalid configuration");
  EXPECT_STREQ(statusName(Status::kDeviceError), "device error");
  EXPECT_STREQ(statusName(Status::kForkedChild), "forked child");
  Error e(Status::kDeviceError, "msg");
  EXPECT_EQ(e.status(), Status::kDeviceError);
  EXPECT_STREQ(e.what(), "msg");
  const std::runtime_error& base = e;  // catchable as std::runtime_error
  EXPECT_STREQ(base.what(), "msg");
}

// ---------------------------------------------------------------------------
// Device

TEST(DeviceTest, InfoAndHbm) {
  Trace trace;
  CoreInfo info{2, 5, 1, 8 * kMiB};
  Device d(info, &trace);
  EXPECT_EQ(d.index(), 2);
  EXPECT_EQ(d.info().logical_core, 5);
  EXPECT_EQ(d.info().chip, 1);
  EXPECT_EQ(d.hbm().capacity(), 8 * kMiB);
  EXPECT_EQ(d.hbm().device(), 2);
  void* p = nullptr;
  ASSERT_EQ(d.hbm().allocate(kMiB, &p), Status::kOk);
  d.hbm().free(p);
}

TEST(DeviceTest, StreamIdsOutOfRangeThrow) {
  Trace trace;
  Device d(smallCore(1), &trace);
  for (int bad : {-1, Device::kNumStreams, Device::kNumStreams + 1, 1000}) {
    EXPECT_TRUE(ThrowsError([&] { d.stream(bad); }, Status::kInvalidArgument,
                            {"neuron:1", std::to_string(bad)}))
        << "id " << bad;
  }
  EXPECT_NO_THROW(d.stream(0));
  EXPECT_NO_THROW(d.stream(Device::kNumStreams - 1));
}

TEST(DeviceTest, StreamsAreCreatedOnceWithIdsAndPriorities) {
  Trace trace;
  Device d(smallCore(3), &trace);
  EXPECT_EQ(Device::kNumStreams, 1 + 2 * Device::kPoolSize);
  EXPECT_EQ(&d.defaultStream(), &d.stream(0));
  for (int id = 0; id < Device::kNumStreams; ++id) {
    Stream& s = d.stream(id);
    EXPECT_EQ(&s, &d.stream(id));
    EXPECT_EQ(s.id(), id);
    EXPECT_EQ(s.device(), 3);
    EXPECT_EQ(s.priority(), Device::priorityOf(id));
  }
  EXPECT_EQ(Device::priorityOf(0), 0);
  EXPECT_EQ(Device::priorityOf(1), 0);
  EXPECT_EQ(Device::priorityOf(Device::kPoolSize), 0);
  EXPECT_EQ(Device::priorityOf(Device::kPoolSize + 1), -1);
  EXPECT_EQ(Device::priorityOf(Device::kNumStreams - 1), -1);
}

TEST(DeviceTest, ConcurrentFirstUseCreatesOneStream) {
  Trace trace;
  Device d(smallCore(0), &trace);
  for (int id = 1; id <= 8; ++id) {
    std::promise<void> go;
    std::shared_future<void> start = go.get_future().share();
    auto get = [&d, start, id] {
      start.wait();
      return &d.stream(id);
    };
    auto f1 = std::async(std::launch::async, get);
    auto f2 = std::async(std::launch::async, get);
    go.set_value();
    EXPECT_EQ(f1.get(), f2.get()) << "stream " << id;
  }
}

TEST(DeviceTest, TakeErrorWithoutErrors) {
  Trace trace;
  Device d(smallCore(0), &trace);
  EXPECT_FALSE(d.takeError().has_value());  // no streams yet
  d.stream(4).enqueue("ok", [] {});
  d.synchronize();
  EXPECT_FALSE(d.takeError().has_value());
}

TEST(DeviceTest, AFailedStepOfABatchIsNamedInTheError) {
  Trace trace;
  Device d(smallCore(0), &trace);
  Stream& s = d.stream(0);
  s.beginBatch("program");
  s.enqueue("ok_step", [] {});
  s.enqueue("bad_step", [] { throw std::runtime_error("index out of range"); });
  s.endBatch();
  d.synchronize();
  auto err = d.takeError();
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->label, "program");
  EXPECT_EQ(err->message, "bad_step (step 2 of program): index out of range");
  EXPECT_EQ(err->status, Status::kDeviceError);
  EXPECT_EQ(err->step, "bad_step");
  EXPECT_EQ(err->step_index, 2);
  EXPECT_EQ(err->step_message, "index out of range");
}

TEST(DeviceTest, TakeErrorFindsTheFailingStream) {
  Trace trace;
  Device d(smallCore(2), &trace);
  d.stream(0).enqueue("fine", [] {});
  d.stream(5).enqueue("fine", [] {});
  uint64_t seq = d.stream(5).enqueue(
      "bad_kernel", [] { throw std::runtime_error("kernel fault"); });
  d.synchronize();

  auto err = d.takeError();
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->device, 2);
  EXPECT_EQ(err->stream, 5);
  EXPECT_EQ(err->seq, seq);
  EXPECT_EQ(err->label, "bad_kernel");
  EXPECT_EQ(err->message, "kernel fault");
  EXPECT_FALSE(d.stream(5).hasError());
  EXPECT_FALSE(d.takeError().has_value());

  // The stream works again.
  bool ran = false;
  d.stream(5).enqueue("after", [&ran] { ran = true; });
  d.synchronize();
  EXPECT_TRUE(ran);
}

TEST(DeviceTest, TakeErrorAcrossStreamsReturnsOneAndClearsAll) {
  Trace trace;
  Device d(smallCore(0), &trace);
  d.stream(3).enqueue("bad3", [] { throw std::runtime_error("e3"); });
  d.stream(Device::kPoolSize + 2).enqueue("bad_hi", [] {
    throw std::runtime_error("ehi");
  });
  d.synchronize();
  EXPECT_TRUE(d.stream(3).hasError());
  EXPECT_TRUE(d.stream(Device::kPoolSize + 2).hasError());

  auto err = d.takeError();
  ASSERT_TRUE(err.has_value());
  EXPECT_TRUE(err->stream == 3 || err->stream == Device::kPoolSize + 2);
  EXPECT_EQ(err->label, err->stream == 3 ? "bad3" : "bad_hi");
  // Every stream of the device is usable again.
  EXPECT_FALSE(d.stream(3).hasError());
  EXPECT_FALSE(d.stream(Device::kPoolSize + 2).hasError());
  EXPECT_FALSE(d.takeError().has_value());
}

TEST(DeviceTest, SynchronizeWaitsForEveryStream) {
  std::atomic<int> done{0};
  Trace trace;
  Device d(smallCore(0), &trace);
  Gate gate;
  const std::vector<int> ids = {0, 1, 7, Device::kPoolSize + 1,
                                Device::kNumStreams - 1};
  for (int id : ids)
    d.stream(id).enqueue("blocked", [w = gate.waiter(), &done] {
      w.wait();
      ++done;
    });
  EXPECT_EQ(done.load(), 0);
  auto synced = std::async(std::launch::async, [&] {
    d.synchronize();
    return done.load();
  });
  gate.open();
  EXPECT_EQ(synced.get(), static_cast<int>(ids.size()));
  for (int id : ids) EXPECT_TRUE(d.stream(id).query());
}

TEST(DeviceTest, DestructorDrainsStreams) {
  std::atomic<int> done{0};
  {
    Trace trace;
    Device d(smallCore(0), &trace);
    for (int id : {0, 2, 20})
      for (int i = 0; i < 100; ++i)
        d.stream(id).enqueue("inc", [&] { ++done; });
  }
  EXPECT_EQ(done.load(), 300);
}

TEST(DeviceTest, EventsOrderWorkAcrossStreamsOfADevice) {
  std::atomic<bool> produced{false};
  bool consumer_saw = false;
  Trace trace;
  Device d(smallCore(0), &trace);
  Gate gate;
  d.stream(1).enqueue("produce", [w = gate.waiter(), &produced] {
    w.wait();
    produced = true;
  });
  Event e;
  e.record(d.stream(1));
  e.block(d.defaultStream());
  d.defaultStream().enqueue("consume", [&] { consumer_saw = produced.load(); });
  gate.open();
  d.defaultStream().synchronize();
  EXPECT_TRUE(consumer_saw);
}

// ---------------------------------------------------------------------------
// Runtime

TEST(RuntimeTest, ConstructWithVisibleCores) {
  Runtime rt(smallConfig({1, 3}));
  ASSERT_EQ(rt.deviceCount(), 2);
  EXPECT_EQ(rt.topology().numVisibleCores(), 2);
  EXPECT_EQ(rt.device(0).index(), 0);
  EXPECT_EQ(rt.device(0).info().logical_core, 1);
  EXPECT_EQ(rt.device(1).index(), 1);
  EXPECT_EQ(rt.device(1).info().logical_core, 3);
  EXPECT_EQ(rt.device(1).hbm().capacity(), 4 * kMiB);
  EXPECT_EQ(rt.device(1).hbm().device(), 1);
  EXPECT_EQ(&rt.device(1), &rt.device(1));
}

TEST(RuntimeTest, DefaultTopologyHasFourDevices) {
  // 4 x 24 GiB arenas: address space only.
  Runtime rt(TopologyConfig{});
  ASSERT_EQ(rt.deviceCount(), 4);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(rt.device(i).hbm().capacity(), 24ull << 30);
}

TEST(RuntimeTest, DeviceIndexOutOfRangeThrows) {
  Runtime rt(smallConfig({0, 2}));
  for (int bad : {2, 3, -1, 100}) {
    EXPECT_TRUE(ThrowsError([&] { rt.device(bad); }, Status::kInvalidArgument,
                            {"2 visible", std::to_string(bad)}))
        << "index " << bad;
  }
}

TEST(RuntimeTest, DeviceIndexErrorWithOneDeviceUsesSingular) {
  Runtime rt(smallConfig({3}));
  ASSERT_EQ(rt.deviceCount(), 1);
  EXPECT_TRUE(ThrowsError([&] { rt.device(1); }, Status::kInvalidArgument,
                          {"1 visible neuron device", "neuron:1"}));
}

TEST(RuntimeTest, InvalidTopologyThrows) {
  EXPECT_TRUE(ThrowsError([] { Runtime rt(smallConfig({4})); },
                          Status::kInvalidConfig));
}

TEST(RuntimeTest, SynchronizeAllWaitsForEveryDevice) {
  std::atomic<int> done{0};
  Runtime rt(smallConfig({0, 1, 2}));
  Gate gate;
  for (int dev = 0; dev < rt.deviceCount(); ++dev)
    for (int id : {0, 3})
      rt.device(dev).stream(id).enqueue("blocked", [w = gate.waiter(), &done] {
        w.wait();
        ++done;
      });
  auto synced = std::async(std::launch::async, [&] {
    rt.synchronizeAll();
    return done.load();
  });
  gate.open();
  EXPECT_EQ(synced.get(), 6);
}

TEST(RuntimeTest, TraceCollectsFromAllDevices) {
  Runtime rt(smallConfig({0, 1}));
  rt.trace().enable(true);
  rt.device(0).defaultStream().enqueue("op_on_0", [] {});
  rt.device(1).stream(2).enqueue("op_on_1", [] {});
  rt.synchronizeAll();
  auto recs = rt.trace().drain();
  ASSERT_EQ(recs.size(), 2u);
  for (const auto& r : recs) {
    if (r.device == 0) {
      EXPECT_STREQ(r.label, "op_on_0");
      EXPECT_EQ(r.stream, 0);
    } else {
      EXPECT_EQ(r.device, 1);
      EXPECT_STREQ(r.label, "op_on_1");
      EXPECT_EQ(r.stream, 2);
    }
    EXPECT_LE(r.start_ns, r.end_ns);
  }
}

TEST(RuntimeTest, ErrorsStayOnTheirDevice) {
  Runtime rt(smallConfig({0, 1}));
  rt.device(1).stream(1).enqueue("bad", [] { throw std::runtime_error("x"); });
  rt.synchronizeAll();
  EXPECT_FALSE(rt.device(0).takeError().has_value());
  auto err = rt.device(1).takeError();
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->device, 1);
}

// The process-wide runtime is never initialised by these tests (outside of
// the forked child below), so visibleDeviceCount() reads the environment.
class RuntimeEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Runtime::initialized())
      GTEST_SKIP() << "process-wide runtime already initialised";
  }
  EnvGuard env_{runtimeEnvVars()};
};

TEST_F(RuntimeEnvTest, VisibleDeviceCountFromEnvironment) {
  EXPECT_EQ(Runtime::visibleDeviceCount(), 4);
  env_.set("NEURON_RT_VISIBLE_CORES", "0,2");
  EXPECT_EQ(Runtime::visibleDeviceCount(), 2);
  env_.set("NEURON_LOGICAL_NC_CONFIG", "1");
  env_.unset("NEURON_RT_VISIBLE_CORES");
  EXPECT_EQ(Runtime::visibleDeviceCount(), 8);
  EXPECT_FALSE(Runtime::initialized());
}

TEST_F(RuntimeEnvTest, VisibleDeviceCountRejectsBadEnvironment) {
  env_.set("NEURON_RT_VISIBLE_CORES", "0-9");
  EXPECT_TRUE(ThrowsError([] { Runtime::visibleDeviceCount(); },
                          Status::kInvalidConfig, {"NEURON_RT_VISIBLE_CORES"}));
}

// Runs `body` in a forked child and returns its exit code (or -1 if it did
// not exit normally). The child never returns into the test framework.
int runInChild(const std::function<int()>& body) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int rc = 1;
    try {
      rc = body();
    } catch (...) {
      rc = 99;
    }
    _exit(rc);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_F(RuntimeEnvTest, GetInitialisesOnceAndRejectsForkedChildren) {
  // Runtime::get() initialises the process-wide runtime for good, so do it
  // in a child process; the child forks a grandchild after initialising.
  env_.set("NEURON_RT_VISIBLE_CORES", "1-2");
  env_.set("TORCH_NEURONX_HBM_BYTES_PER_CORE", "1MiB");
  int rc = runInChild([] {
    if (Runtime::initialized() || Runtime::inBadFork()) return 2;
    Runtime& rt = Runtime::get();
    if (&rt != &Runtime::get()) return 3;
    if (!Runtime::initialized()) return 4;
    if (rt.deviceCount() != 2 || Runtime::visibleDeviceCount() != 2) return 5;
    if (rt.device(1).info().logical_core != 2) return 6;
    if (rt.device(0).hbm().capacity() != kMiB) return 7;
    // Use a stream so the parent has a worker thread when it forks.
    rt.device(0).defaultStream().enqueue("op", [] {});
    rt.device(0).synchronize();

    int grandchild = runInChild([] {
      if (!Runtime::inBadFork()) return 10;
      if (Runtime::initialized()) return 11;
      try {
        Runtime::get();
      } catch (const Error& e) {
        if (e.status() != Status::kForkedChild) return 12;
        if (std::string(e.what()).find("spawn") == std::string::npos) return 13;
        return 0;
      }
      return 14;
    });
    if (grandchild != 0) return 20 + grandchild;
    // The parent is unaffected by its child's fork.
    if (Runtime::inBadFork()) return 40;
    rt.device(0).defaultStream().enqueue("op", [] {});
    rt.device(0).synchronize();
    return 0;
  });
  EXPECT_EQ(rc, 0);
  EXPECT_FALSE(Runtime::initialized());
}

TEST_F(RuntimeEnvTest, GetWithBadEnvironmentThrowsAndStaysUninitialised) {
  env_.set("NEURON_LOGICAL_NC_CONFIG", "5");
  int rc = runInChild([] {
    try {
      Runtime::get();
      return 1;
    } catch (const Error& e) {
      if (e.status() != Status::kInvalidConfig) return 2;
      if (std::string(e.what()).find("NEURON_LOGICAL_NC_CONFIG") ==
          std::string::npos)
        return 3;
    }
    if (Runtime::initialized()) return 4;
    return 0;
  });
  EXPECT_EQ(rc, 0);
}

}  // namespace
}  // namespace neuron_rt
