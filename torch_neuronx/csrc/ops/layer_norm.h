// Layer norm on the device: ATen's CPU layer-norm kernels (the LayerNorm
// dispatch stubs) run in the work item straight into the device outputs.
//
// native_layer_norm has a CPU kernel and a composite one, and neither is
// structured: through the generic path it cost a temporary per output and a
// copy into device memory, three times as long as on the CPU in a GPT step.
// Output shapes are simple enough to compute here, on the host, with the
// same checks and messages as the CPU kernel. Built where ATen's CPU stubs
// can be called (eager/cpu_dispatch_stub.h: x86_64); elsewhere the generic
// path runs these ops.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <optional>
#include <tuple>

#include "eager/cpu_dispatch_stub.h"  // TORCH_NEURONX_HAS_CPU_STUBS

namespace torch_neuronx {

// aten::native_layer_norm: (output, mean, rstd); mean and rstd have the
// input's leading dims and 1 for each normalized dim, in float for a reduced
// precision input with float parameters (the CPU's mixed type), else in the
// input's dtype.
std::tuple<at::Tensor, at::Tensor, at::Tensor> nativeLayerNorm(
    const at::Tensor& input, at::IntArrayRef normalized_shape,
    const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, double eps);

// aten::native_layer_norm_backward: (grad_input, grad_weight, grad_bias),
// each undefined where output_mask says it is not wanted.
std::tuple<at::Tensor, at::Tensor, at::Tensor> nativeLayerNormBackward(
    const at::Tensor& grad_out, const at::Tensor& input,
    at::IntArrayRef normalized_shape, const at::Tensor& mean,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, std::array<bool, 3> output_mask);

}  // namespace torch_neuronx
