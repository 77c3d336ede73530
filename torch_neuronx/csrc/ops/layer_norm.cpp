#include "ops/layer_norm.h"  // first: sets up DispatchStub.h

#if TORCH_NEURONX_HAS_CPU_STUBS
#include <ATen/ATen.h>
#include <ATen/native/cpu/mixed_data_type.h>
#include <ATen/native/layer_norm.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <memory>

#include "adaptive/item_signature.h"
#include "core/memory_history.h"
#include "core/stream.h"
#include "eager/alias_plan.h"
#include "eager/device_check.h"
#include "eager/op_item.h"
#include "eager/op_stats.h"
#include "eager/run_on_device.h"
#include "profiler/op_cost.h"

namespace torch_neuronx {
namespace {

const at::Tensor& orUndefined(const std::optional<at::Tensor>& t) {
  static const at::Tensor undefined;
  return t ? *t : undefined;
}

c10::DeviceIndex deviceOf(std::initializer_list<const at::Tensor*> tensors) {
  DeviceCheck dc;
  for (const at::Tensor* t : tensors)
    if (t->defined()) dc.tensor(*t);
  return dc.finish();
}

// The CPU kernels dispatch on these; anything else gets the CPU's message
// at the op instead of at the next sync point.
void checkDtype(const at::Tensor& input) {
  const auto t = input.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(t == at::kFloat || t == at::kDouble ||
                                  t == at::kHalf || t == at::kBFloat16,
                              "\"LayerNormKernelImpl\" not implemented for '",
                              toString(t), "'");
}

// Contiguous and defined stays as is; undefined stays undefined.
at::Tensor contiguousOrUndefined(const at::Tensor& t) {
  return t.defined() ? t.contiguous() : t;
}

// The forward's item says what it computes (eager/op_item.h). Its kernel
// normalises each row of N on its own, so it runs over any whole rows of its
// tensors (a fused pass's tiles): M follows from the input it is given.
class LayerNormForwardItem final : public OpItem {
 public:
  LayerNormForwardItem(const char* name, int64_t m, int64_t n, double eps)
      : OpItem(name), m_(m), n_(n), eps_(eps) {}
  AliasPlan plan;  // x, gamma, beta, out, mean, rstd

  void run() override {
    runOnDevice([&] {
      AliasPlan::Built t = plan.build();
      runOn(t);
    });
  }
  void runOn(AliasPlan::Built& t) override {
    // Its own tensors: its M (rows of no elements included); tiles: theirs.
    const int64_t m =
        t[0].numel() == m_ * n_ || n_ == 0 ? m_ : t[0].numel() / n_;
    at::native::LayerNormKernel(c10::kCPU, t[0], t[1], t[2], m, n_, eps_, &t[3],
                                &t[4], &t[5]);
  }
  const AliasPlan& operands() const override { return plan; }
  bool writes(int i) const override { return i >= 3; }
  std::vector<c10::IValue> arguments() const override {
    const at::Tensor x = describeOperand(plan, 0);
    std::vector<int64_t> shape(x.sizes().end() - normalizedDims(x),
                               x.sizes().end());
    return {x,
            c10::IValue(shape),
            describeOperand(plan, 1),
            describeOperand(plan, 2),
            c10::IValue(eps_),
            describeOperand(plan, 3),
            describeOperand(plan, 4),
            describeOperand(plan, 5)};
  }
  int64_t rowLength() const override { return n_; }

 protected:
  AliasPlan& operandsForUpdate() override { return plan; }

 private:
  // The trailing dims of x making up a row of n_ elements.
  int64_t normalizedDims(const at::Tensor& x) const {
    int64_t d = 0, p = 1;
    while (d < x.dim() && p < n_) p *= x.size(x.dim() - 1 - d++);
    return d;
  }
  int64_t m_;
  int64_t n_;
  double eps_;
};

template <typename F>
void launchKernel(c10::DeviceIndex device, const char* name, F&& body) {
  launch(device, name,
         [body = std::forward<F>(body)]() mutable { runOnDevice(body); });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> nativeLayerNorm(
    const at::Tensor& input, at::IntArrayRef normalized_shape,
    const std::optional<at::Tensor>& weight_opt,
    const std::optional<at::Tensor>& bias_opt, double eps) {
  static constexpr const char* kName = "aten::native_layer_norm";
  static std::atomic<uint32_t> noted{0};
  noteExecutedOnce(kName, noted);
  AllocLabel label(kName);
  const at::Tensor& weight = orUndefined(weight_opt);
  const at::Tensor& bias = orUndefined(bias_opt);
  const c10::DeviceIndex device = deviceOf({&input, &weight, &bias});
  const bool mixed = at::native::is_mixed_type(input, weight, bias);
  if (mixed) at::native::check_mixed_data_type(input, weight, bias);
  const auto [M, N] = at::native::_check_layer_norm_inputs(
      input, normalized_shape, weight, bias);
  checkDtype(input);

  const at::Tensor x = input.contiguous();
  const at::Tensor gamma = contiguousOrUndefined(weight);
  const at::Tensor beta = contiguousOrUndefined(bias);
  at::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous);
  // mean and rstd: M values, viewed with the input's leading dims.
  c10::DimVector stat_shape(input.sizes().begin(),
                            input.sizes().end() - normalized_shape.size());
  stat_shape.resize(input.dim(), 1);
  const auto stat_opts =
      x.options().dtype(at::native::param_scalar_type(input, mixed));
  at::Tensor mean = at::empty(stat_shape, stat_opts);
  at::Tensor rstd = at::empty(stat_shape, stat_opts);

  auto item = std::make_unique<LayerNormForwardItem>(kName, M, N, eps);
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{
           &x, &gamma, &beta, &out, &mean, &rstd})
    item->plan.add(*t);
  if (profiler::recordingItems()) profiler::noteEagerItem(kName, item->plan);
  if (adaptive::enabled()) adaptive::signFromPlan(kName, item->plan);
  launchTask(device, kName, std::move(item));
  return {out, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> nativeLayerNormBackward(
    const at::Tensor& grad_out, const at::Tensor& input,
    at::IntArrayRef normalized_shape, const at::Tensor& mean,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight_opt,
    const std::optional<at::Tensor>& bias_opt, std::array<bool, 3> mask) {
  static constexpr const char* kName = "aten::native_layer_norm_backward";
  static std::atomic<uint32_t> noted{0};
  noteExecutedOnce(kName, noted);
  AllocLabel label(kName);
  const at::Tensor& weight = orUndefined(weight_opt);
  const at::Tensor& bias = orUndefined(bias_opt);
  const c10::DeviceIndex device =
      deviceOf({&grad_out, &input, &mean, &rstd, &weight, &bias});
  const auto [M, N] = at::native::_check_layer_norm_inputs(
      input, normalized_shape, weight, bias);
  checkDtype(input);
  // The CPU kernel reads every tensor as a dense buffer of M * N (or M).
  TORCH_CHECK(grad_out.numel() == M * N, "native_layer_norm_backward: grad_out",
              " has ", grad_out.numel(), " elements, expected ", M * N);
  TORCH_CHECK(mean.numel() == M && rstd.numel() == M,
              "native_layer_norm_backward: mean and rstd must have ", M,
              " elements, got ", mean.numel(), " and ", rstd.numel());

  const at::Tensor x = input.contiguous();
  const at::Tensor gamma = contiguousOrUndefined(weight);
  const at::Tensor beta = contiguousOrUndefined(bias);
  const auto contiguous = at::MemoryFormat::Contiguous;
  at::Tensor dx, dgamma, dbeta;
  if (mask[0]) dx = at::empty_like(x, contiguous);
  // With no rows there is nothing to reduce: the parameter grads are zero.
  auto param_grad = [&](const at::Tensor& p) {
    return M > 0 ? at::empty_like(p, contiguous)
                 : at::zeros_like(p, contiguous);
  };
  if (mask[1]) dgamma = param_grad(gamma);
  if (mask[2]) dbeta = param_grad(beta);
  if (M == 0) return {dx, dgamma, dbeta};

  // The contiguous copies are queued before the kernel; stream order keeps
  // their memory valid until it has run.
  const at::Tensor dy = grad_out.contiguous(), m = mean.contiguous(),
                   r = rstd.contiguous();
  auto plan = std::make_shared<AliasPlan>();
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{
           &dy, &x, &m, &r, &gamma, &dx, &dgamma, &dbeta})
    plan->add(*t);
  if (profiler::recordingItems()) profiler::noteEagerItem(kName, *plan);
  if (adaptive::enabled()) adaptive::signFromPlan(kName, *plan);
  launchKernel(device, kName, [plan, M = M, N = N] {
    AliasPlan::Built t = plan->build();  // dy, x, mean, rstd, gamma, dx, ...
    at::native::LayerNormBackwardKernel(c10::kCPU, t[0], t[1], t[2], t[3], t[4],
                                        M, N, &t[5], &t[6], &t[7]);
  });
  return {dx, dgamma, dbeta};
}

}  // namespace torch_neuronx

#endif  // TORCH_NEURONX_HAS_CPU_STUBS
