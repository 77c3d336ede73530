// Finding the device an op runs on, at launch on the host: PyTorch's
// same-device rule, with TorchNeuron's wording for a tensor of another device.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <optional>

namespace torch_neuronx {

inline bool isNeuron(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// Finds the device of an op and enforces PyTorch's same-device rule: CPU
// tensors may take part only as 0-dim scalars, as on CUDA. `arg` names the
// argument a tensor came in, for the error.
class DeviceCheck {
 public:
  void tensor(const at::Tensor& t, const char* arg = nullptr);
  void device(const c10::Device& d);
  // The op's device; throws the usual "Expected all tensors to be on the
  // same device" error for a mix.
  c10::DeviceIndex finish();

 private:
  c10::DeviceIndex device_ = -1;
  std::optional<c10::Device> other_;
  const char* other_arg_ = nullptr;
};

}  // namespace torch_neuronx
