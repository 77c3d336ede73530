// torch.histc on integer tensors, as CUDA computes it (the CPU kernel takes
// floating types only). transformers' Mixture-of-Experts routing counts the
// tokens per expert with histc on integer expert ids on every device but
// the CPU. Floating inputs keep the generic device-op path.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

namespace torch_neuronx {

at::Tensor histcOp(const at::Tensor& self, int64_t bins, const at::Scalar& min,
                   const at::Scalar& max);
at::Tensor& histcOut(const at::Tensor& self, int64_t bins,
                     const at::Scalar& min, const at::Scalar& max,
                     at::Tensor& out);

}  // namespace torch_neuronx
