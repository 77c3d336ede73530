#include "eager/op_args.h"

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

at::Tensor MetaMirror::operator()(const at::Tensor& t) {
  if (!t.defined()) return t;
  if (!isNeuron(t)) {
    // A Python number (wrapped number) goes to the Meta kernel as it is:
    // Meta kernels take those beside meta tensors, and Python meta kernels
    // require them on the CPU. Other CPU scalars become 0-dim meta tensors,
    // which every Meta kernel accepts.
    if (t.unsafeGetTensorImpl()->is_wrapped_number()) return t;
    return at::empty({}, t.options().device(c10::kMeta));
  }
  const c10::Storage& meta = storages_.get(t, [](const at::Tensor& d) {
    return c10::Storage(c10::Storage::use_byte_size_t(), d.storage().nbytes(),
                        c10::GetAllocator(c10::kMeta), /*resizable=*/true);
  });
  return tensorOver(meta, c10::DispatchKey::Meta, t);
}

}  // namespace torch_neuronx
