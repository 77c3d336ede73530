// Dropout on the device, drawing its mask from the neuron generator.
//
// ATen's dropout takes the fused native_dropout path for PrivateUse1 inputs;
// the CPU kernel of native_dropout would draw from the CPU default generator,
// so neuron seeds would not reproduce it. This kernel claims the neuron
// generator's (seed, offset) at launch, like every other random op.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace torch_neuronx {

// aten::native_dropout: (output, bool mask), CUDA's semantics: train=false
// returns a copy and an all-true mask, p == 1 zeros and an all-false mask.
std::tuple<at::Tensor, at::Tensor> nativeDropout(const at::Tensor& input,
                                                 double p,
                                                 std::optional<bool> train);

}  // namespace torch_neuronx
