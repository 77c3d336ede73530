// Dropout on neuron: the fused op CUDA runs (ATen's dropout sends PrivateUse1
// inputs to native_dropout, as it sends CUDA's; TorchNeuron reports
// aten::native_dropout and aten::native_dropout_backward), computing the CPU's
// numbers, so that a seeded run draws the CPU's masks and computes the CPU's
// outputs and gradients bitwise.
//
// The CPU computes F.dropout as noise = bernoulli_(1 - p) / (1 - p) (in the
// input's dtype), output = input * noise, gradient = grad * noise. The
// forward draws the same noise from the device's CPU generator
// (eager/random_op.h) and keeps it as the bool mask; the backward rebuilds
// the noise from the mask the same way (mask / (1 - p)). Under torch.compile
// the op stays an eager call (Inductor's fallback_random).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace torch_neuronx {

// aten::native_dropout: (output, bool mask), with CUDA's answers where the
// CPU's differ: p == 1 gives zeros (not input * 0, NaN for infinite inputs)
// and an all-false mask.
std::tuple<at::Tensor, at::Tensor> nativeDropout(const at::Tensor& input,
                                                 double p,
                                                 std::optional<bool> train);

// aten::native_dropout_backward: grad * noise, the noise rebuilt from the
// mask and scale = 1 / (1 - p).
at::Tensor nativeDropoutBackward(const at::Tensor& grad_output,
                                 const at::Tensor& mask, double scale);

}  // namespace torch_neuronx
