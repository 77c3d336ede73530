#include "ops/sync_batch_norm.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <vector>

#include "core/memory_history.h"
#include "eager/host_kernel_item.h"

namespace torch_neuronx {
namespace {

using Built = AliasPlan::Built;

// CUDA's accumulate type: double for double inputs, else float.
c10::ScalarType statsType(const at::Tensor& input) {
  return input.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

void checkInput(const char* op, const at::Tensor& input) {
  TORCH_CHECK(input.dim() >= 2, op,
              ": expected an input with a channel dim (N, C, ...), got ",
              input.dim(), "-D");
}

void checkPerChannel(const char* op, const char* what, const at::Tensor& t,
                     int64_t channels) {
  TORCH_CHECK(!t.defined() || (t.dim() == 1 && t.size(0) == channels), op,
              ": expected ", what, " of size [", channels, "], got ",
              t.sizes());
}

// The backward ops' common arguments: grad_out shaped like the input, the
// per-channel statistics and weight. The channel count.
int64_t checkBackward(const char* op, const at::Tensor& grad_out,
                      const at::Tensor& input, const at::Tensor& mean,
                      const at::Tensor& invstd, const at::Tensor& weight) {
  checkInput(op, input);
  TORCH_CHECK(grad_out.sizes() == input.sizes(), op,
              ": expected grad_out of size ", input.sizes(), ", got ",
              grad_out.sizes());
  const int64_t c = input.size(1);
  checkPerChannel(op, "mean", mean, c);
  checkPerChannel(op, "invstd", invstd, c);
  checkPerChannel(op, "weight", weight, c);
  return c;
}

// Every dim but the channel dim (1).
std::vector<int64_t> reducedDims(int64_t dim) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < dim; ++d) dims.push_back(d);
  return dims;
}

// A [C] tensor shaped to broadcast over an input of `dim` dims.
at::Tensor perChannel(const at::Tensor& v, int64_t dim) {
  std::vector<int64_t> shape(dim, 1);
  shape[1] = v.size(0);
  return v.view(shape);
}

at::Tensor emptyLikeInput(const at::Tensor& input) {
  return at::empty_like(input, input.suggest_memory_format());
}

// The normalisation, written into `out` (CPU aliases, opmath inputs).
void normalize(const at::Tensor& x, const at::Tensor& weight,
               const at::Tensor& bias, const at::Tensor& mean,
               const at::Tensor& invstd, at::Tensor& out) {
  const int64_t d = x.dim();
  at::Tensor y = (x - perChannel(mean, d)) * perChannel(invstd, d);
  if (weight.defined()) y = y * perChannel(weight, d);
  if (bias.defined()) y = y + perChannel(bias, d);
  out.copy_(y);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> batchNormStats(const at::Tensor& input,
                                                  double eps) {
  static constexpr char kName[] = "aten::batch_norm_stats";
  static std::atomic<uint32_t> noted{0};
  AllocLabel label(kName);
  checkInput("batch_norm_stats", input);
  const auto opts = input.options().dtype(statsType(input));
  at::Tensor mean = at::empty({input.size(1)}, opts);
  at::Tensor invstd = at::empty({input.size(1)}, opts);
  launchHostKernel(kName, noted, 1, {input, mean, invstd}, [eps](Built& t) {
    const at::Tensor x = t[0].to(t[1].scalar_type());
    auto [var, m] = at::var_mean(x, reducedDims(x.dim()), /*correction=*/0);
    t[1].copy_(m);
    t[2].copy_((var + eps).rsqrt());
  });
  return {mean, invstd};
}

at::Tensor& batchNormElemtOut(const at::Tensor& input,
                              const std::optional<at::Tensor>& weight_opt,
                              const std::optional<at::Tensor>& bias_opt,
                              const at::Tensor& mean, const at::Tensor& invstd,
                              double /*eps: invstd has it*/, at::Tensor& out) {
  static constexpr char kName[] = "aten::batch_norm_elemt";
  static std::atomic<uint32_t> noted{0};
  AllocLabel label(kName);
  checkInput("batch_norm_elemt", input);
  const at::Tensor weight = valueOr(weight_opt), bias = valueOr(bias_opt);
  const int64_t c = input.size(1);
  checkPerChannel("batch_norm_elemt", "weight", weight, c);
  checkPerChannel("batch_norm_elemt", "bias", bias, c);
  checkPerChannel("batch_norm_elemt", "mean", mean, c);
  checkPerChannel("batch_norm_elemt", "invstd", invstd, c);
  if (out.sizes() != input.sizes())
    out.resize_(input.sizes(), input.suggest_memory_format());
  launchHostKernel(
      kName, noted, 5, {input, weight, bias, mean, invstd, out},
      [](Built& t) { normalize(t[0], t[1], t[2], t[3], t[4], t[5]); });
  return out;
}

at::Tensor batchNormElemt(const at::Tensor& input,
                          const std::optional<at::Tensor>& weight,
                          const std::optional<at::Tensor>& bias,
                          const at::Tensor& mean, const at::Tensor& invstd,
                          double eps) {
  at::Tensor out = emptyLikeInput(input);
  batchNormElemtOut(input, weight, bias, mean, invstd, eps, out);
  return out;
}

std::tuple<at::Tensor, at::Tensor> batchNormGatherStatsWithCounts(
    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean_opt,
    const std::optional<at::Tensor>& running_var_opt, double momentum,
    double eps, const at::Tensor& counts) {
  static constexpr char kName[] = "aten::batch_norm_gather_stats_with_counts";
  static std::atomic<uint32_t> noted{0};
  AllocLabel label(kName);
  const at::Tensor running_mean = valueOr(running_mean_opt);
  const at::Tensor running_var = valueOr(running_var_opt);
  TORCH_CHECK(mean.dim() == 2 && invstd.sizes() == mean.sizes(),
              "batch_norm_gather_stats_with_counts: expected mean and invstd "
              "of size [world_size, C], got ",
              mean.sizes(), " and ", invstd.sizes());
  const int64_t c = mean.size(1);
  TORCH_CHECK(counts.numel() == mean.size(0),
              "batch_norm_gather_stats_with_counts: expected one count per "
              "rank (",
              mean.size(0), "), got ", counts.numel());
  checkPerChannel("batch_norm_gather_stats_with_counts", "running_mean",
                  running_mean, c);
  checkPerChannel("batch_norm_gather_stats_with_counts", "running_var",
                  running_var, c);
  const auto opts = mean.options().dtype(
      mean.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  at::Tensor save_mean = at::empty({c}, opts);
  at::Tensor save_invstd = at::empty({c}, opts);
  launchHostKernel(
      kName, noted, 3,
      {mean, invstd, counts, running_mean, running_var, save_mean, save_invstd},
      [momentum, eps](Built& t) {
        const auto type = t[5].scalar_type();
        const at::Tensor m = t[0].to(type), is = t[1].to(type);
        const at::Tensor n = t[2].to(type).reshape({-1, 1});  // [world, 1]
        const at::Tensor total = n.sum();
        // Welford's parallel merge, all ranks at once: the global mean, and
        // the sum of squared deviations from each rank's biased variance.
        const at::Tensor global = (n * m).sum(0) / total;
        const at::Tensor var = is.pow(-2) - eps;
        const at::Tensor m2 = (n * (var + (m - global).square())).sum(0);
        const at::Tensor biased = m2 / total;
        t[5].copy_(global);
        t[6].copy_((biased + eps).rsqrt());
        // Running statistics updated in the statistics' type, rounded once
        // (a bfloat16 model's buffers), as CUDA's kernel does.
        if (t[3].defined())
          t[3].copy_(t[3].to(type) * (1 - momentum) + global * momentum);
        if (t[4].defined())
          t[4].copy_(t[4].to(type) * (1 - momentum) +
                     m2 / (total - 1) * momentum);
      });
  return {save_mean, save_invstd};
}

std::tuple<at::Tensor, at::Tensor> batchNormGatherStats(
    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var, double momentum, double eps,
    int64_t count) {
  const at::Tensor counts =
      at::full({mean.size(0)}, static_cast<double>(count), mean.options());
  return batchNormGatherStatsWithCounts(input, mean, invstd, running_mean,
                                        running_var, momentum, eps, counts);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>
batchNormBackwardReduce(const at::Tensor& grad_out, const at::Tensor& input,
                        const at::Tensor& mean, const at::Tensor& invstd,
                        const std::optional<at::Tensor>& weight_opt,
                        bool input_g, bool weight_g, bool bias_g) {
  static constexpr char kName[] = "aten::batch_norm_backward_reduce";
  static std::atomic<uint32_t> noted{0};
  AllocLabel label(kName);
  const at::Tensor weight = valueOr(weight_opt);
  const int64_t c = checkBackward("batch_norm_backward_reduce", grad_out, input,
                                  mean, invstd, weight);
  const auto stats = mean.options();
  const auto param = weight.defined() ? weight.options() : stats;
  at::Tensor sum_dy, sum_dy_xmu, grad_weight, grad_bias;
  if (input_g) {
    sum_dy = at::empty({c}, stats);
    sum_dy_xmu = at::empty({c}, stats);
  }
  if (weight_g) grad_weight = at::empty({c}, param);
  if (bias_g) grad_bias = at::empty({c}, param);
  if (!input_g && !weight_g && !bias_g) return {};
  launchHostKernel(kName, noted, 4,
                   {grad_out, input, mean, invstd, sum_dy, sum_dy_xmu,
                    grad_weight, grad_bias},
                   [](Built& t) {
                     const auto type = t[2].scalar_type();
                     const at::Tensor dy = t[0].to(type), x = t[1].to(type);
                     const int64_t d = x.dim();
                     const auto dims = reducedDims(d);
                     const at::Tensor sdy = dy.sum(dims);
                     const at::Tensor sdy_xmu =
                         (dy * (x - perChannel(t[2], d))).sum(dims);
                     if (t[4].defined()) t[4].copy_(sdy);
                     if (t[5].defined()) t[5].copy_(sdy_xmu);
                     if (t[6].defined()) t[6].copy_(sdy_xmu * t[3]);
                     if (t[7].defined()) t[7].copy_(sdy);
                   });
  return {sum_dy, sum_dy_xmu, grad_weight, grad_bias};
}

at::Tensor batchNormBackwardElemt(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& invstd, const std::optional<at::Tensor>& weight_opt,
    const at::Tensor& sum_dy, const at::Tensor& sum_dy_xmu,
    const at::Tensor& count) {
  static constexpr char kName[] = "aten::batch_norm_backward_elemt";
  static std::atomic<uint32_t> noted{0};
  AllocLabel label(kName);
  const at::Tensor weight = valueOr(weight_opt);
  const int64_t c = checkBackward("batch_norm_backward_elemt", grad_out, input,
                                  mean, invstd, weight);
  checkPerChannel("batch_norm_backward_elemt", "sum_dy", sum_dy, c);
  checkPerChannel("batch_norm_backward_elemt", "sum_dy_xmu", sum_dy_xmu, c);
  at::Tensor grad_input = emptyLikeInput(input);
  launchHostKernel(
      kName, noted, 8,
      {grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count,
       grad_input},
      [](Built& t) {
        const auto type = t[2].scalar_type();
        const int64_t d = t[1].dim();
        const at::Tensor total = t[7].to(type).sum();
        const at::Tensor mean_dy = perChannel(t[5].to(type) / total, d);
        const at::Tensor mean_dy_xmu = perChannel(t[6].to(type) / total, d);
        const at::Tensor is = perChannel(t[3].to(type), d);
        const at::Tensor xmu = t[1].to(type) - perChannel(t[2], d);
        at::Tensor g =
            (t[0].to(type) - mean_dy - xmu * is.square() * mean_dy_xmu) * is;
        if (t[4].defined()) g = g * perChannel(t[4].to(type), d);
        t[8].copy_(g);
      });
  return grad_input;
}

}  // namespace torch_neuronx
