// One work item whose computation is a host function written with ATen's
// CPU ops over the CPU aliases of its tensors: for ops ATen has no CPU
// kernel for (CUDA-only ones such as the fused RNN cells and SyncBatchNorm's
// statistics), so the generic path (device_op.h) cannot run them. The call
// stays one device op: one item on the current stream, profiled and signed
// like any other.
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>

#include "adaptive/item_signature.h"
#include "core/stream.h"
#include "eager/alias_plan.h"
#include "eager/device_check.h"
#include "eager/op_stats.h"
#include "eager/run_on_device.h"
#include "profiler/op_cost.h"

namespace torch_neuronx {

// Float for float16/bfloat16 tensors, as CUDA's kernels compute in their
// opmath type; results are rounded once, when they are written.
inline at::Tensor opmath(const at::Tensor& t) {
  return t.defined() && at::isReducedFloatingType(t.scalar_type())
             ? t.to(at::kFloat)
             : t;
}

// An optional tensor argument as a host kernel's tensor list takes it:
// undefined when absent.
inline at::Tensor valueOr(const std::optional<at::Tensor>& t) {
  return t.has_value() ? *t : at::Tensor();
}

// One work item over `tensors`: its `inputs` first, then the outputs it
// writes (undefined ones stay undefined). `body` gets their CPU aliases in
// that order, the inputs in opmath. `name` is recorded as executed once per
// op-tracking generation (`noted`).
template <typename Body>
void launchHostKernel(const char* name, std::atomic<uint32_t>& noted,
                      size_t inputs, std::initializer_list<at::Tensor> tensors,
                      Body body) {
  noteExecutedOnce(name, noted);
  DeviceCheck dc;
  for (const at::Tensor& t : tensors) dc.tensor(t);
  const c10::DeviceIndex device = dc.finish();
  auto plan = std::make_shared<AliasPlan>();
  for (const at::Tensor& t : tensors) plan->add(t);
  if (profiler::recordingItems()) profiler::noteEagerItem(name, *plan);
  if (adaptive::enabled()) adaptive::signFromPlan(name, *plan);
  launch(device, name, [plan, inputs, body] {
    runOnDevice([&] {
      AliasPlan::Built t = plan->build();
      for (size_t k = 0; k < inputs; ++k) t[k] = opmath(t[k]);
      body(t);
    });
  });
}

}  // namespace torch_neuronx
