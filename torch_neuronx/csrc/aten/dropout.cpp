#include "aten/dropout.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <memory>
#include <stdexcept>

#include "aten/cpu_alias.h"
#include "aten/op_stats.h"
#include "aten/run_on_device.h"
#include "core/generator.h"
#include "core/stream.h"

namespace torch_neuronx {

std::tuple<at::Tensor, at::Tensor> nativeDropout(const at::Tensor& input,
                                                 double p,
                                                 std::optional<bool> train) {
  static std::atomic<uint32_t> noted{0};
  noteExecutedOnce("aten::native_dropout", noted);
  TORCH_CHECK(p >= 0 && p <= 1,
              "dropout probability has to be between 0 and 1, but got ", p);
  const auto bool_opts = input.options().dtype(at::kBool);
  if (train.has_value() && !*train)
    return {input.clone(), at::ones_like(input, bool_opts)};
  if (p == 1) return {at::zeros_like(input), at::zeros_like(input, bool_opts)};
  at::Tensor out = at::empty_like(input);
  at::Tensor mask = at::empty_like(input, bool_opts);
  if (input.numel() == 0) return {out, mask};

  const c10::DeviceIndex device = input.device().index();
  const double keep = 1.0 - p;
  at::Generator gen = launchGenerator(std::nullopt, device);
  auto aliases = std::make_shared<AliasSet>();
  at::Tensor in_a = aliases->alias(input);
  at::Tensor out_a = aliases->alias(out);
  at::Tensor mask_a = aliases->alias(mask);
  launch(device, "aten::native_dropout",
         [aliases, in_a, out_a, mask_a, gen, keep]() mutable {
           runOnDevice([&] {
             mask_a.bernoulli_(keep, gen);
             at::mul_out(out_a, in_a, mask_a);
             out_a.mul_(1.0 / keep);
           });
         });
  return {out, mask};
}

}  // namespace torch_neuronx
