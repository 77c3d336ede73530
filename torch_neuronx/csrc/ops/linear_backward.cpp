#include "ops/linear_backward.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace torch_neuronx {

std::tuple<at::Tensor, at::Tensor, at::Tensor> linearBackward(
    const at::Tensor& self, const at::Tensor& grad_output,
    const at::Tensor& weight, std::array<bool, 3> output_mask) {
  TORCH_CHECK(weight.dim() == 2,
              "linear_backward: expected a 2-D weight [out_features, "
              "in_features], got ",
              weight.dim(), "-D");
  const int64_t out_features = weight.size(0), in_features = weight.size(1);
  TORCH_CHECK(self.dim() >= 1 && self.size(-1) == in_features,
              "linear_backward: expected an input whose last dim is "
              "in_features (",
              in_features, "), got ", self.sizes());
  TORCH_CHECK(grad_output.dim() >= 1 && grad_output.size(-1) == out_features,
              "linear_backward: expected grad_output whose last dim is "
              "out_features (",
              out_features, "), got ", grad_output.sizes());
  at::Tensor grad_input, grad_weight, grad_bias;
  if (output_mask[0]) grad_input = grad_output.matmul(weight);
  if (output_mask[1] || output_mask[2]) {
    const at::Tensor g = grad_output.reshape({-1, out_features});
    if (output_mask[1]) grad_weight = g.t().mm(self.reshape({-1, in_features}));
    if (output_mask[2]) grad_bias = g.sum(0);
  }
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace torch_neuronx
