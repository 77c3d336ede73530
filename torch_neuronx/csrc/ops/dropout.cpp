#include "ops/dropout.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace torch_neuronx {

std::tuple<at::Tensor, at::Tensor> nativeDropout(const at::Tensor& input,
                                                 double p,
                                                 std::optional<bool> train) {
  TORCH_CHECK(p >= 0 && p <= 1,
              "dropout probability has to be between 0 and 1, but got ", p);
  const auto bool_opts = input.options().dtype(at::kBool);
  if (train.has_value() && !*train)
    return {input.clone(), at::ones_like(input, bool_opts)};
  if (p == 1) return {at::zeros_like(input), at::zeros_like(input, bool_opts)};
  if (input.numel() == 0)
    return {at::empty_like(input), at::empty_like(input, bool_opts)};
  const double keep = 1.0 - p;
  at::Tensor noise = at::empty_like(input);  // the CPU's draw, in its dtype
  noise.bernoulli_(keep);
  noise.div_(keep);
  return {input.mul(noise), noise.ne(0)};
}

at::Tensor nativeDropoutBackward(const at::Tensor& grad_output,
                                 const at::Tensor& mask, double scale) {
  TORCH_CHECK(mask.scalar_type() == at::kBool,
              "Mask should be Bool Scalar Type", mask.scalar_type());
  // Not a dropout's gradient (an integer grad called directly): the CPU
  // kernel's formula, and its result type.
  if (!at::isFloatingType(grad_output.scalar_type()))
    return grad_output.mul(mask).mul(scale);
  at::Tensor noise = mask.to(grad_output.scalar_type());
  noise.div_(1.0 / scale);  // 1 - p: the CPU's noise, bit for bit
  return grad_output.mul(noise);
}

}  // namespace torch_neuronx
