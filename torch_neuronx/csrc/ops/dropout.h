// Dropout on neuron, as the CPU computes it, so that a seeded run draws the
// CPU's masks and computes the CPU's outputs and gradients bitwise.
//
// ATen's dropout sends PrivateUse1 inputs to the fused native_dropout (as
// CUDA's); the CPU computes F.dropout as noise = bernoulli_(1 - p) / (1 - p),
// input * noise, with autograd through those ops. `dropout` is registered for
// neuron (its autograd and backend keys) as that composite: its bernoulli_
// draws from the device's CPU generator (eager/random_op.h), its arithmetic
// and backward are the CPU's kernels. Under torch.compile the same ops are
// traced (the random one stays an eager call: Inductor's fallback_random).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace torch_neuronx {

// aten::dropout: the CPU's dropout (not the fused one).
at::Tensor dropoutOp(const at::Tensor& input, double p, bool train);

// aten::native_dropout: (output, bool mask), called directly or by a
// decomposition: the CPU's kernel (mask = bernoulli_(1 - p), output = input *
// mask * (1 / (1 - p))), with CUDA's answers where the CPU's differ: p == 1
// gives zeros (not input * 0, NaN for infinite inputs) and an all-false mask.
std::tuple<at::Tensor, at::Tensor> nativeDropout(const at::Tensor& input,
                                                 double p,
                                                 std::optional<bool> train);

}  // namespace torch_neuronx
