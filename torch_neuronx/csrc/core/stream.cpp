#include "core/stream.h"

#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>

#include "core/compute_pool.h"
#include "core/device.h"
#include "core/device_error.h"

namespace torch_neuronx {
namespace {

using neuron_rt::Device;

thread_local std::array<c10::StreamId, kMaxDeviceIndices> tls_current_stream{};

std::array<std::atomic<uint32_t>, kMaxDeviceIndices> pool_counter_normal{};
std::array<std::atomic<uint32_t>, kMaxDeviceIndices> pool_counter_high{};

c10::Stream makeStream(c10::DeviceIndex device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, neuronDevice(device), id);
}

bool readLaunchBlocking() {
  const char* v = std::getenv("NEURON_LAUNCH_BLOCKING");
  if (!v || !*v || std::strcmp(v, "0") == 0) return false;
  TORCH_CHECK(std::strcmp(v, "1") == 0, "invalid NEURON_LAUNCH_BLOCKING='", v,
              "': expected 0 or 1");
  return true;
}

}  // namespace

c10::Stream currentStream(c10::DeviceIndex device) {
  checkDeviceIndex(device);
  return makeStream(device, tls_current_stream[device]);
}

c10::Stream defaultStream(c10::DeviceIndex device) {
  checkDeviceIndex(device);
  return makeStream(device, 0);
}

void setCurrentStream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "expected a neuron stream, got a stream of ", stream.device());
  checkDeviceIndex(stream.device_index());
  TORCH_CHECK(stream.id() >= 0 && stream.id() < Device::kNumStreams,
              "invalid neuron stream id ", stream.id());
  tls_current_stream[stream.device_index()] = stream.id();
}

c10::Stream streamFromPool(c10::DeviceIndex device, bool high_priority) {
  checkDeviceIndex(device);
  auto& counter =
      high_priority ? pool_counter_high[device] : pool_counter_normal[device];
  uint32_t n = counter.fetch_add(1, std::memory_order_relaxed);
  c10::StreamId id = 1 + static_cast<c10::StreamId>(n % Device::kPoolSize) +
                     (high_priority ? Device::kPoolSize : 0);
  return makeStream(device, id);
}

neuron_rt::Stream& runtimeStream(const c10::Stream& stream) {
  try {
    return runtimeDevice(stream.device_index())
        .stream(static_cast<int>(stream.id()));
  } catch (const neuron_rt::Error& e) {
    rethrowRuntimeError(e);
  }
}

const char* internLabel(const std::string& s) {
  static std::mutex mu;
  static auto* labels = new std::unordered_set<std::string>();  // never freed
  std::lock_guard<std::mutex> g(mu);
  return labels->insert(s).first->c_str();
}

bool launchBlocking() {
  static const bool blocking = readLaunchBlocking();
  return blocking;
}

namespace {

// `work`: a function or a Task.
template <typename Work>
void enqueueOn(const c10::Stream& stream, const char* label, Work work,
               neuron_rt::ItemKind kind) {
  neuron_rt::Stream& s = runtimeStream(stream);
  releaseThreadComputePool();
  uint64_t seq = s.enqueue(label, std::move(work), kind);
  if (launchBlocking() && !s.capturing()) {  // captured items do not run
    s.waitFor(seq);
    raisePendingError(stream.device_index());
  }
}

}  // namespace

void launchOn(const c10::Stream& stream, const char* label,
              std::function<void()> fn, neuron_rt::ItemKind kind) {
  enqueueOn(stream, label, std::move(fn), kind);
}

void launchTask(c10::DeviceIndex device, const char* label,
                neuron_rt::TaskPtr task, neuron_rt::ItemKind kind) {
  enqueueOn(currentStream(device), label, std::move(task), kind);
}

void launch(c10::DeviceIndex device, const char* label,
            std::function<void()> fn, neuron_rt::ItemKind kind) {
  launchOn(currentStream(device), label, std::move(fn), kind);
}

void raisePendingError(c10::DeviceIndex device) {
  auto err = runtimeDevice(device).takeError();
  if (!err) return;
  if (err->status == neuron_rt::Status::kCollectiveFailed)
    C10_THROW_ERROR(DistBackendError, err->message);  // names the collective
  throwDeviceError(deviceErrorInfo(device, *err));
}

void synchronizeStream(const c10::Stream& stream) {
  runtimeStream(stream).synchronize();
  raisePendingError(stream.device_index());
}

void synchronizeDevice(c10::DeviceIndex device) {
  runtimeDevice(device).synchronize();
  raisePendingError(device);
}

}  // namespace torch_neuronx
