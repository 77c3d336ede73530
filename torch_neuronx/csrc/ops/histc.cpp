#include "ops/histc.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <ATen/native/Resize.h>
#include <c10/util/Exception.h>

#include <memory>
#include <vector>

#include "core/stream.h"
#include "eager/alias_plan.h"
#include "eager/device_check.h"
#include "eager/device_op.h"
#include "eager/dtype_widening.h"
#include "eager/op_stats.h"
#include "eager/run_on_device.h"
#include "profiler/op_cost.h"

namespace torch_neuronx {
namespace {

// Bins of the integers in [lo, hi] (CUDA's rule, in int64 arithmetic: bin =
// (v - lo) * bins / (hi - lo), the top edge belonging to the last bin);
// values outside are not counted.
template <typename T>
void countInto(const at::Tensor& in, at::Tensor& out, int64_t bins, int64_t lo,
               int64_t hi) {
  std::vector<int64_t> counts(bins, 0);
  const at::Tensor flat = in.contiguous();
  const T* p = flat.const_data_ptr<T>();
  const int64_t n = flat.numel();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = static_cast<int64_t>(p[i]);
    if (v < lo || v > hi) continue;
    int64_t b = (v - lo) * bins / (hi - lo);
    if (b == bins) b -= 1;
    ++counts[b];
  }
  T* o = out.data_ptr<T>();
  const int64_t stride = out.stride(0);
  for (int64_t b = 0; b < bins; ++b) o[b * stride] = static_cast<T>(counts[b]);
}

at::Tensor genericHistc(const at::Tensor& self, int64_t bins,
                        const at::Scalar& min, const at::Scalar& max) {
  static const c10::OperatorHandle op = operatorNamed("aten::histc");
  torch::jit::Stack s =
      c10::impl::boxArgs<const at::Tensor&, int64_t, const at::Scalar&,
                         const at::Scalar&>(self, bins, min, max);
  deviceOpFallback(op, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), &s);
  return s.back().toTensor();
}

}  // namespace

at::Tensor histcOp(const at::Tensor& self, int64_t bins, const at::Scalar& min,
                   const at::Scalar& max) {
  if (!at::isIntegralType(self.scalar_type(), /*includeBool=*/false))
    return genericHistc(self, bins, min, max);
  static std::atomic<uint32_t> noted{0};
  noteExecutedOnce("aten::histc", noted);
  TORCH_CHECK(bins > 0, "bins must be > 0");
  // CUDA converts the bounds to the accumulation type (int64 for integers).
  int64_t lo = min.to<int64_t>();
  int64_t hi = max.to<int64_t>();
  if (lo == hi && self.numel() > 0) {
    // The data's range: a sync point, as on CUDA.
    auto [mn, mx] = at::aminmax(self);
    lo = mn.item<int64_t>();
    hi = mx.item<int64_t>();
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  TORCH_CHECK(lo < hi, "max must be larger than min");
  at::Tensor out = at::empty({bins}, self.options());
  if (self.numel() == 0) return out.zero_();

  auto plan = std::make_shared<AliasPlan>();
  plan->add(self);
  plan->add(out);
  if (profiler::recordingItems()) profiler::noteEagerItem("aten::histc", *plan);
  launch(self.device().index(), "aten::histc", [plan, bins, lo, hi] {
    runOnDevice([&] {
      AliasPlan::Built t = plan->build();  // input, out
      AT_DISPATCH_INTEGRAL_TYPES(t[0].scalar_type(), "histc", [&] {
        countInto<scalar_t>(t[0], t[1], bins, lo, hi);
      });
    });
  });
  return out;
}

at::Tensor& histcOut(const at::Tensor& self, int64_t bins,
                     const at::Scalar& min, const at::Scalar& max,
                     at::Tensor& out) {
  TORCH_CHECK(isNeuron(out), "Expected out tensor to have device ",
              self.device(), ", but got ", out.device(), " instead");
  at::Tensor result = histcOp(self, bins, min, max);
  TORCH_CHECK(out.scalar_type() == result.scalar_type(),
              "torch.histogram: input tensor and hist should have the same "
              "dtype, but got input ",
              result.scalar_type(), " and hist ", out.scalar_type());
  at::native::resize_output(out, result.sizes());
  out.copy_(result);
  return out;
}

}  // namespace torch_neuronx
