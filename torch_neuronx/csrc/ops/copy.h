// Copies between neuron and CPU memory and between neuron devices, as work
// items ordered with the surrounding work; and reading a scalar to the host.
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_neuronx {

at::Tensor& copyInto(at::Tensor& self, const at::Tensor& src,
                     bool non_blocking);
at::Tensor copyFrom(const at::Tensor& self, const at::Tensor& dst,
                    bool non_blocking);
at::Tensor copyFromAndResize(const at::Tensor& self, const at::Tensor& dst);
c10::Scalar localScalarDense(const at::Tensor& self);

}  // namespace torch_neuronx
