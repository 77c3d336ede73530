// The public C++ API (torch_neuronx/include) as a libtorch program without
// Python uses it: guards set and restore, the allocator gives device memory,
// launched work runs in stream order and its errors reach synchronisation.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch_neuronx/neuron.h>

#include <atomic>
#include <stdexcept>
#include <vector>

namespace {

using torch_neuronx::kNeuron;

class PublicApi : public ::testing::Test {
 protected:
  void SetUp() override { torch_neuronx::init(); }
};

TEST_F(PublicApi, InitNamesTheDevice) {
  torch_neuronx::init();  // again: nothing happens
  EXPECT_EQ(c10::get_privateuse1_backend(), "neuron");
  EXPECT_GE(torch_neuronx::getDeviceCount(), 1);
  EXPECT_EQ(at::ones({2}, at::device(kNeuron)).device().str(), "neuron:0");
}

TEST_F(PublicApi, StreamGuardSetsAndRestoresTheCurrentStream) {
  const c10::Stream default_stream = torch_neuronx::getDefaultNeuronStream();
  ASSERT_EQ(torch_neuronx::getCurrentNeuronStream(), default_stream);
  const c10::Stream side = torch_neuronx::getStreamFromPool();
  ASSERT_NE(side, default_stream);
  EXPECT_EQ(side.device_type(), kNeuron);
  {
    torch_neuronx::NeuronStreamGuard guard(side);
    EXPECT_EQ(torch_neuronx::getCurrentNeuronStream(), side);
    EXPECT_EQ(guard.original_stream(), default_stream);
    const c10::Stream high = torch_neuronx::getStreamFromPool(true);
    guard.reset_stream(high);
    EXPECT_EQ(torch_neuronx::getCurrentNeuronStream(), high);
  }
  EXPECT_EQ(torch_neuronx::getCurrentNeuronStream(), default_stream);

  torch_neuronx::setCurrentNeuronStream(side);
  EXPECT_EQ(torch_neuronx::getCurrentNeuronStream(), side);
  torch_neuronx::setCurrentNeuronStream(default_stream);

  const c10::Stream cpu_stream(c10::Stream::DEFAULT, c10::Device(at::kCPU));
  EXPECT_THROW(torch_neuronx::NeuronStreamGuard{cpu_stream}, c10::Error);
}

TEST_F(PublicApi, DeviceGuardSetsAndRestoresTheCurrentDevice) {
  const c10::DeviceIndex start = torch_neuronx::getDevice();
  const c10::DeviceIndex last = torch_neuronx::getDeviceCount() - 1;
  {
    torch_neuronx::NeuronGuard guard(last);
    EXPECT_EQ(torch_neuronx::getDevice(), last);
    EXPECT_EQ(guard.original_device(), c10::Device(kNeuron, start));
    EXPECT_EQ(guard.current_device(), c10::Device(kNeuron, last));
    // Tensors are made on the guard's device.
    EXPECT_EQ(at::empty({1}, at::device(kNeuron)).device().index(), last);
  }
  EXPECT_EQ(torch_neuronx::getDevice(), start);
  // An index that is not one of the process's devices.
  EXPECT_THROW(torch_neuronx::NeuronGuard{static_cast<c10::DeviceIndex>(
                   torch_neuronx::getDeviceCount())},
               c10::IndexError);
  EXPECT_EQ(torch_neuronx::getDevice(), start);
  EXPECT_THROW(torch_neuronx::NeuronGuard{c10::Device(at::kCPU)}, c10::Error);
}

TEST_F(PublicApi, AllocatorGivesDeviceMemory) {
  const c10::DeviceIndex device = torch_neuronx::getDevice();
  c10::DeviceAllocator* allocator = torch_neuronx::getNeuronAllocator();
  ASSERT_NE(allocator, nullptr);
  EXPECT_EQ(allocator, c10::GetAllocator(kNeuron));
  const auto before =
      allocator->getDeviceStats(device).allocated_bytes[0].current;
  {
    c10::DataPtr p = torch_neuronx::allocate(1 << 20);
    ASSERT_NE(p.get(), nullptr);
    EXPECT_EQ(p.device(), c10::Device(kNeuron, device));
    EXPECT_GE(allocator->getDeviceStats(device).allocated_bytes[0].current,
              before + (1 << 20));
    c10::DataPtr q = allocator->allocate(64);
    EXPECT_EQ(q.device(), c10::Device(kNeuron, device));
    EXPECT_NE(q.get(), p.get());
  }
  EXPECT_EQ(allocator->getDeviceStats(device).allocated_bytes[0].current,
            before);
}

TEST_F(PublicApi, LaunchedWorkRunsInStreamOrder) {
  const int64_t n = 1000;
  at::Tensor x = at::arange(n, at::device(kNeuron).dtype(at::kFloat));
  at::Tensor y = at::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  // Queued after arange's item on the same stream: sees its values.
  torch_neuronx::launchOnCurrentStream("twice", [=] {
    for (int64_t i = 0; i < n; ++i) out[i] = 2 * in[i];
  });
  EXPECT_TRUE(at::equal(y.cpu(), at::arange(n, at::kFloat) * 2));

  // On a side stream, ordered after the default stream's work by the caller.
  const c10::Stream side = torch_neuronx::getStreamFromPool();
  torch_neuronx::deviceSynchronize();
  std::atomic<int> ran{0};
  torch_neuronx::launchOnStream(side, "count", [&] { ran.fetch_add(1); });
  torch_neuronx::streamSynchronize(side);
  EXPECT_EQ(ran.load(), 1);
  EXPECT_TRUE(torch_neuronx::streamQuery(side));
}

TEST_F(PublicApi, AFailedWorkItemRaisesAtTheNextSynchronize) {
  torch_neuronx::launchOnCurrentStream(
      "failing_kernel", [] { throw std::runtime_error("bad tile"); });
  try {
    torch_neuronx::deviceSynchronize();
    FAIL() << "the failed item was not raised";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("failing_kernel"), std::string::npos)
        << e.what();
  }
  // The device stays usable.
  EXPECT_EQ(at::ones({3}, at::device(kNeuron)).sum().item<float>(), 3.0f);
}

}  // namespace
