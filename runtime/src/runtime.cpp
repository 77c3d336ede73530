#include "neuron_runtime/runtime.h"

#include <pthread.h>

#include <atomic>
#include <mutex>
#include <string>

#include "neuron_runtime/status.h"
#include "neuron_runtime/trainium_estimate.h"

namespace neuron_rt {
namespace {

std::atomic<Runtime*> g_runtime{nullptr};
std::atomic<bool> g_bad_fork{false};
std::mutex g_init_mu;

void markChildAfterFork() {
  if (g_runtime.load()) {
    g_bad_fork.store(true);
    // The parent's worker threads do not exist here; the object is leaked on
    // purpose, destroying it would join threads that are gone.
    g_runtime.store(nullptr);
  }
}

[[noreturn]] void throwBadFork() {
  throw Error(Status::kForkedChild,
              "Cannot re-initialize neuron in forked subprocess. To use "
              "neuron with multiprocessing, you must use the 'spawn' start "
              "method (torch.multiprocessing.set_start_method('spawn') or "
              "get_context('spawn')).");
}

}  // namespace

Runtime::Runtime(const TopologyConfig& config) : topology_(config) {
  for (int i = 0; i < topology_.numVisibleCores(); ++i)
    devices_.push_back(std::make_unique<Device>(topology_.core(i), &trace_));
}

Runtime& Runtime::get() {
  if (Runtime* r = g_runtime.load(std::memory_order_acquire)) return *r;
  if (g_bad_fork.load()) throwBadFork();
  std::lock_guard<std::mutex> g(g_init_mu);
  if (Runtime* r = g_runtime.load()) return *r;
  static std::once_flag atfork_once;
  std::call_once(atfork_once,
                 [] { pthread_atfork(nullptr, nullptr, markChildAfterFork); });
  // Leaked deliberately: worker threads may still be running items while
  // static destructors run at exit.
  TopologyConfig config = Topology::configFromEnv();
  trainiumModel();  // TORCH_NEURONX_PROFILE_TARGET, checked with the rest
  Runtime* r = new Runtime(config);
  g_runtime.store(r, std::memory_order_release);
  return *r;
}

bool Runtime::initialized() { return g_runtime.load() != nullptr; }
bool Runtime::inBadFork() { return g_bad_fork.load(); }

int Runtime::visibleDeviceCount() {
  if (Runtime* r = g_runtime.load()) return r->deviceCount();
  return Topology(Topology::configFromEnv()).numVisibleCores();
}

Device& Runtime::device(int index) {
  if (index < 0 || index >= deviceCount())
    throw Error(Status::kInvalidArgument,
                "Invalid device index neuron:" + std::to_string(index) +
                    ": there " + (deviceCount() == 1 ? "is " : "are ") +
                    std::to_string(deviceCount()) + " visible neuron device" +
                    (deviceCount() == 1 ? "" : "s") +
                    " (valid indices are 0.." +
                    std::to_string(deviceCount() - 1) +
                    "; see NEURON_RT_VISIBLE_CORES)");
  return *devices_[index];
}

void Runtime::synchronizeAll() {
  for (auto& d : devices_) d->synchronize();
}

}  // namespace neuron_rt
