#include "ops/dropout.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace torch_neuronx {

at::Tensor dropoutOp(const at::Tensor& input, double p, bool train) {
  TORCH_CHECK(p >= 0 && p <= 1,
              "dropout probability has to be between 0 and 1, but got ", p);
  if (p == 0 || !train || input.sym_numel() == 0) return input;
  if (p == 1) return input.mul(at::zeros({}, input.options()));
  at::Tensor noise = at::empty_like(input);
  noise.bernoulli_(1 - p);
  noise.div_(1 - p);
  return input.mul(noise);
}

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
  at::Tensor mask = at::empty_like(input, bool_opts);
  mask.bernoulli_(keep);
  return {input.mul(mask).mul_(1.0 / keep), mask};
}

}  // namespace torch_neuronx
