#include "eager/device_check.h"

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include <string>

#include "core/device.h"

namespace torch_neuronx {
namespace {

// Torch's message; `detail` follows it.
[[noreturn]] void mixedDevices(c10::Device a, c10::Device b,
                               const std::string& detail = "") {
  TORCH_CHECK(false,
              "Expected all tensors to be on the same device, but found at "
              "least two devices, ",
              a, " and ", b, "!", detail);
}

// Torch's message, then TorchNeuron's wording for a tensor of another
// device type (code written for TorchNeuron looks for it).
[[noreturn]] void otherDeviceType(c10::Device neuron, c10::Device other,
                                  const char* arg) {
  mixedDevices(neuron, other,
               " (" +
                   (arg ? std::string("argument '") + arg + "'"
                        : std::string("a tensor")) +
                   " is on " + c10::DeviceTypeName(other.type(), true) +
                   " device, expected neuron; move it with .to('neuron'), or "
                   "pass a Python number or 0-dim CPU tensor)");
}

}  // namespace

void DeviceCheck::tensor(const at::Tensor& t, const char* arg) {
  if (!t.defined()) return;
  if (isNeuron(t)) {
    c10::DeviceIndex idx = t.device().index();
    if (device_ < 0)
      device_ = idx;
    else if (device_ != idx)
      mixedDevices(neuronDevice(device_), t.device());
  } else if (!(t.device().is_cpu() && t.dim() == 0)) {
    if (!other_) {
      other_ = t.device();
      other_arg_ = arg;
    }
  }
}

void DeviceCheck::device(const c10::Device& d) {
  if (d.type() == c10::DeviceType::PrivateUse1 && device_ < 0)
    device_ = d.has_index() ? d.index() : currentDevice();
}

c10::DeviceIndex DeviceCheck::finish() {
  if (device_ < 0) device_ = currentDevice();
  if (other_) otherDeviceType(neuronDevice(device_), *other_, other_arg_);
  return device_;
}

}  // namespace torch_neuronx
