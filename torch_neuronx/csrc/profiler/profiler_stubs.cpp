// The profiler stubs of the PrivateUse1 backend: what torch's legacy profiler
// (torch.autograd.profiler.profile(use_device="neuron", use_kineto=False),
// ProfilerState::KINETO_PRIVATEUSE1_FALLBACK) uses to time each op on the
// device, as CUDA's stubs do with CUDA events: an event recorded on the
// current stream when the op starts and one when it ends, their distance the
// op's device time. The Kineto plugin (kineto_plugin.cpp) is the full device
// timeline; this is the fallback torch keeps for backends without one.
#include <c10/util/ApproximateClock.h>
#include <neuron_runtime/event.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <memory>

#include "core/device.h"
#include "core/stream.h"
#include "profiler/registration.h"

namespace torch_neuronx::profiler {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

struct NeuronProfilerStubs final : public torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    const c10::DeviceIndex d = currentDevice();
    if (device) *device = d;
    auto recorded = std::make_shared<neuron_rt::Event>();
    recorded->record(runtimeStream(currentStream(d)));
    if (cpu_ns) *cpu_ns = c10::getTime();
    *event = recorded;
  }

  // Microseconds between two recorded events (waits for both).
  float elapsed(const ProfilerVoidEventStub* start,
                const ProfilerVoidEventStub* end) const override {
    auto* a = static_cast<neuron_rt::Event*>(start->get());
    auto* b = static_cast<neuron_rt::Event*>(end->get());
    a->synchronize();
    b->synchronize();
    return static_cast<float>(a->elapsedMs(*b) * 1000.0);
  }

  // Ranges and marks are NVTX's on CUDA; the device has no annotation API.
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}

  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> op) const override {
    const DeviceNumbering n = deviceNumbering();
    const c10::DeviceIndex before = currentDevice();
    for (int i = n.first; i < n.first + n.count; ++i) {
      setCurrentDevice(static_cast<c10::DeviceIndex>(i));
      op(i);
    }
    setCurrentDevice(before);
  }

  void synchronize() const override { runtime().synchronizeAll(); }
};

}  // namespace

void registerProfilerStubs() {
  static NeuronProfilerStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
}

}  // namespace torch_neuronx::profiler
