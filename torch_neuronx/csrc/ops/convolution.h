// Convolutions. ATen sends convolutions on backends it does not know to the
// *_overrideable hooks, whose own kernels only throw; these adapters run them
// as aten::convolution / aten::convolution_backward on the generic device-op
// path (the CPU backend's kernels over device memory).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torch_neuronx {

void convolutionOverrideable(const c10::OperatorHandle& op,
                             c10::DispatchKeySet ks, torch::jit::Stack* stack);
void convolutionBackwardOverrideable(const c10::OperatorHandle& op,
                                     c10::DispatchKeySet ks,
                                     torch::jit::Stack* stack);

}  // namespace torch_neuronx
