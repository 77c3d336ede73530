// Autocast on the neuron device (the AutocastPrivateUse1 dispatch key).
//
// The op policy mirrors CUDA's: the same ATen op lists (from
// ATen/autocast_mode.h) get the same cast policies, and every other op falls
// through to the next dispatch key unchanged. Only the default low-precision
// dtype differs (bfloat16; torch_neuronx/amp.py sets it at load time).
#pragma once

#include <ATen/ATen.h>

namespace torch_neuronx {

// binary_cross_entropy is unsafe under autocast (it can overflow in the low
// precision); like CUDA, autocast refuses it and points to the safe op.
at::Tensor binaryCrossEntropyBanned(const at::Tensor& self,
                                    const at::Tensor& target,
                                    const std::optional<at::Tensor>& weight,
                                    int64_t reduction);

}  // namespace torch_neuronx
