// aten::linear_backward: the gradients of linear(input, weight, bias) in one
// call, which MPS and TorchNeuron provide and code written for them calls
// directly (ATen has no CPU or CUDA kernel: autograd of linear goes through
// matmul and sum). Computed as CPU autograd computes them: two matmuls and a
// sum, each a device op.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <tuple>

namespace torch_neuronx {

// (grad_input, grad_weight, grad_bias), each defined where output_mask asks.
std::tuple<at::Tensor, at::Tensor, at::Tensor> linearBackward(
    const at::Tensor& self, const at::Tensor& grad_output,
    const at::Tensor& weight, std::array<bool, 3> output_mask);

}  // namespace torch_neuronx
