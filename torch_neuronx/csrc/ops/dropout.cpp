#include "ops/dropout.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <memory>
#include <stdexcept>

#include "adaptive/item_signature.h"
#include "core/generator.h"
#include "core/stream.h"
#include "eager/cpu_alias.h"
#include "eager/op_stats.h"
#include "eager/run_on_device.h"
#include "profiler/op_cost.h"

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
  auto plan = std::make_shared<AliasPlan>();
  plan->add(input);
  plan->add(out);
  plan->add(mask);
  if (profiler::recordingItems())
    profiler::noteEagerItem("aten::native_dropout", *plan);
  if (adaptive::enabled())
    adaptive::signFromPlan("aten::native_dropout", *plan);
  launch(device, "aten::native_dropout", [plan, gen, keep]() mutable {
    runOnDevice([&] {
      AliasPlan::Built t = plan->build();  // input, out, mask
      t[2].bernoulli_(keep, gen);
      at::mul_out(t[1], t[0], t[2]);
      t[1].mul_(1.0 / keep);
    });
  });
  return {out, mask};
}

}  // namespace torch_neuronx
