// Tensors inside boxed arguments (IValues): a tensor, a tensor list or an
// optional-tensor list. Shared by the boxed kernels (the generic device-op
// path, dtype widening).
#pragma once

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <optional>
#include <vector>

namespace torch_neuronx {

// `v` with every tensor in it replaced by f(tensor); other values as they are.
template <typename F>
c10::IValue mapTensors(const c10::IValue& v, F&& f) {
  if (v.isTensor()) return f(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(f(t));
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList())
      out.push_back(t.has_value() && t->defined()
                        ? std::optional<at::Tensor>(f(*t))
                        : std::nullopt);
    return out;
  }
  return v;
}

template <typename F>
void forEachTensor(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) f(t);
  } else if (v.isOptionalTensorList()) {
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList())
      if (t.has_value()) f(*t);
  }
}

// A neuron device argument mapped to `to` (the device a kernel runs on).
inline c10::IValue mapDevice(const c10::IValue& v, c10::Device to) {
  if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1)
    return c10::IValue(to);
  return v;
}

// Tensor arguments in order, lists flattened.
inline std::vector<at::Tensor> flatTensors(
    const std::vector<c10::IValue>& args) {
  std::vector<at::Tensor> out;
  for (const c10::IValue& v : args)
    forEachTensor(v, [&](const at::Tensor& t) { out.push_back(t); });
  return out;
}

}  // namespace torch_neuronx
