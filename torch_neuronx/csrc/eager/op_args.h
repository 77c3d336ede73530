// Host-side handling of an op's arguments at launch: finding the device the
// op runs on (PyTorch's same-device rule), and mirroring arguments as meta
// tensors so output metadata can be computed without touching device memory.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>

#include <optional>
#include <utility>
#include <vector>

#include "eager/tensor_mirror.h"

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

// Mirrors tensors as meta tensors with the same geometry. Arguments that
// share a device storage get mirrors that share one meta storage, so Meta
// kernels see the same aliasing (and views map back to their base).
class MetaMirror {
 public:
  at::Tensor operator()(const at::Tensor& t);

 private:
  StorageMap storages_;
};

}  // namespace torch_neuronx
