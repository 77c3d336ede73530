// The batch-norm statistics ops nn.SyncBatchNorm is built from
// (torch/nn/modules/_functions.py): per-rank statistics, their merge across
// ranks, the normalisation, and the backward's reductions. ATen has them for
// CUDA only, so on neuron every SyncBatchNorm failed. Each call is one work
// item computing what CUDA's kernels compute (same outputs, dtypes and
// formulas: statistics in float for float16/bfloat16 inputs, the ranks'
// statistics merged as Welford's parallel algorithm merges them), with
// ATen's CPU ops on the aliases.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace torch_neuronx {

// (mean, invstd) per channel (dim 1) over every other dim.
std::tuple<at::Tensor, at::Tensor> batchNormStats(const at::Tensor& input,
                                                  double eps);

// (input - mean) * invstd * weight + bias, per channel.
at::Tensor batchNormElemt(const at::Tensor& input,
                          const std::optional<at::Tensor>& weight,
                          const std::optional<at::Tensor>& bias,
                          const at::Tensor& mean, const at::Tensor& invstd,
                          double eps);
at::Tensor& batchNormElemtOut(const at::Tensor& input,
                              const std::optional<at::Tensor>& weight,
                              const std::optional<at::Tensor>& bias,
                              const at::Tensor& mean, const at::Tensor& invstd,
                              double eps, at::Tensor& out);

// The global (mean, invstd) from each rank's [world, C] statistics and
// element counts; updates the running statistics (unbiased variance).
std::tuple<at::Tensor, at::Tensor> batchNormGatherStatsWithCounts(
    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var, double momentum, double eps,
    const at::Tensor& counts);
// The same with one count for every rank.
std::tuple<at::Tensor, at::Tensor> batchNormGatherStats(
    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var, double momentum, double eps,
    int64_t count);

// (sum_dy, sum_dy_xmu, grad_weight, grad_bias) per channel; each defined
// only when asked for (input_g for the first two).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>
batchNormBackwardReduce(const at::Tensor& grad_out, const at::Tensor& input,
                        const at::Tensor& mean, const at::Tensor& invstd,
                        const std::optional<at::Tensor>& weight, bool input_g,
                        bool weight_g, bool bias_g);

// The input's gradient from the all-reduced sums and the ranks' counts.
at::Tensor batchNormBackwardElemt(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
    const at::Tensor& invstd, const std::optional<at::Tensor>& weight,
    const at::Tensor& sum_dy, const at::Tensor& sum_dy_xmu,
    const at::Tensor& count);

}  // namespace torch_neuronx
