#include "core/device_error.h"

#include <atomic>
#include <utility>

#include "core/stream.h"

namespace torch_neuronx {
namespace {

std::atomic<DeviceErrorThrower> g_thrower{nullptr};

}  // namespace

DeviceError::DeviceError(DeviceErrorInfo info, std::string message)
    : c10::AcceleratorError(
          c10::SourceLocation{__func__, __FILE__,
                              static_cast<uint32_t>(__LINE__)},
          static_cast<int32_t>(info.status), std::move(message)),
      info_(std::move(info)) {}

DeviceErrorInfo deviceErrorInfo(c10::DeviceIndex device,
                                const neuron_rt::WorkError& error) {
  DeviceErrorInfo info;
  info.device = static_cast<int>(device);
  info.stream = error.stream;
  info.work_item = error.seq;
  info.op = error.label;
  info.status = error.status;
  if (error.step_index > 0) {
    info.step = error.step;
    info.step_index = error.step_index;
    info.detail = error.step_message;
  } else {
    info.detail = error.message;
  }
  return info;
}

std::string deviceErrorMessage(const DeviceErrorInfo& info) {
  std::string what = info.detail;
  if (info.step_index > 0)  // the runtime's wording of a failed step
    what = info.step + " (step " + std::to_string(info.step_index) + " of " +
           info.op + "): " + info.detail;
  std::string msg = "neuron:" + std::to_string(info.device) +
                    ": device error in " + info.op + " (work item " +
                    std::to_string(info.work_item) + " on stream " +
                    std::to_string(info.stream) + "): " + what;
  if (!launchBlocking())
    msg +=
        "\nDevice errors are reported at the next synchronization point, so "
        "the Python stack may point past the failing op; set "
        "NEURON_LAUNCH_BLOCKING=1 to raise them at the op itself.";
  return msg;
}

void throwDeviceError(DeviceErrorInfo info) {
  std::string message = deviceErrorMessage(info);
  DeviceError error(std::move(info), std::move(message));
  if (DeviceErrorThrower thrower = g_thrower.load(std::memory_order_acquire))
    thrower(error);
  throw error;
}

void setDeviceErrorThrower(DeviceErrorThrower thrower) {
  g_thrower.store(thrower, std::memory_order_release);
}

}  // namespace torch_neuronx
