#include "ops/rnn_cells.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <atomic>

#include "core/memory_history.h"
#include "eager/host_kernel_item.h"

namespace torch_neuronx {
namespace {

using Built = AliasPlan::Built;

// The argument checks CUDA's fused cells make (sizes, matching biases,
// one dtype), in our words.
void checkGates(const char* op, const at::Tensor& input_gates,
                const at::Tensor& hidden_gates, const at::Tensor& prev_hidden,
                const at::Tensor& input_bias, const at::Tensor& hidden_bias,
                int64_t factor) {
  TORCH_CHECK(input_gates.dim() == 2, op,
              ": expected input_gates to be 2-D, got ", input_gates.dim(),
              "-D");
  TORCH_CHECK(input_gates.sizes() == hidden_gates.sizes(), op,
              ": input_gates and hidden_gates must have the same size, got ",
              input_gates.sizes(), " and ", hidden_gates.sizes());
  TORCH_CHECK(
      prev_hidden.dim() == 2 && prev_hidden.size(0) == input_gates.size(0) &&
          input_gates.size(1) == factor * prev_hidden.size(1),
      op, ": expected the previous hidden state to be [", input_gates.size(0),
      ", ", input_gates.size(1) / factor, "] for gates of size ",
      input_gates.sizes(), ", got ", prev_hidden.sizes());
  TORCH_CHECK(
      input_bias.defined() == hidden_bias.defined(), op,
      ": input_bias and hidden_bias must both be given or both be None");
  for (const at::Tensor* b : {&input_bias, &hidden_bias})
    TORCH_CHECK(
        !b->defined() || (b->dim() == 1 && b->size(0) == input_gates.size(1)),
        op, ": expected a bias of size [", input_gates.size(1), "], got ",
        b->sizes());
  for (const at::Tensor* t :
       {&hidden_gates, &prev_hidden, &input_bias, &hidden_bias})
    TORCH_CHECK(!t->defined() || t->scalar_type() == input_gates.scalar_type(),
                op, ": expected all tensors to have dtype ",
                input_gates.scalar_type(), ", got ", t->scalar_type());
}

at::Tensor sigmoidGrad(const at::Tensor& y) { return y * (1 - y); }
at::Tensor tanhGrad(const at::Tensor& y) { return 1 - y * y; }

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> fusedLstmCell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates,
    const at::Tensor& cx, const std::optional<at::Tensor>& input_bias_opt,
    const std::optional<at::Tensor>& hidden_bias_opt) {
  static constexpr char kName[] = "aten::_thnn_fused_lstm_cell";
  static std::atomic<uint32_t> noted{0};
  AllocLabel label(kName);
  const at::Tensor input_bias = valueOr(input_bias_opt);
  const at::Tensor hidden_bias = valueOr(hidden_bias_opt);
  checkGates("_thnn_fused_lstm_cell", input_gates, hidden_gates, cx, input_bias,
             hidden_bias, 4);
  at::Tensor hy = at::empty(cx.sizes(), cx.options());
  at::Tensor cy = at::empty(cx.sizes(), cx.options());
  at::Tensor workspace = at::empty(input_gates.sizes(), input_gates.options());
  launchHostKernel(kName, noted, 5,
                   {input_gates, hidden_gates, cx, input_bias, hidden_bias, hy,
                    cy, workspace},
                   [](Built& t) {
                     at::Tensor gates = t[0] + t[1];
                     if (t[3].defined()) gates = gates + t[3] + t[4];
                     auto g = gates.chunk(4, 1);
                     const at::Tensor i = g[0].sigmoid();
                     const at::Tensor f = g[1].sigmoid();
                     const at::Tensor c = g[2].tanh();
                     const at::Tensor o = g[3].sigmoid();
                     const at::Tensor cy = f * t[2] + i * c;
                     t[6].copy_(cy);
                     t[5].copy_(o * cy.tanh());
                     t[7].copy_(at::cat({i, f, c, o}, 1));
                   });
  return {hy, cy, workspace};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fusedLstmCellBackwardImpl(
    const std::optional<at::Tensor>& grad_hy_opt,
    const std::optional<at::Tensor>& grad_cy_opt, const at::Tensor& cx,
    const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  static constexpr char kName[] = "aten::_thnn_fused_lstm_cell_backward_impl";
  static std::atomic<uint32_t> noted{0};
  AllocLabel label(kName);
  const at::Tensor grad_hy = valueOr(grad_hy_opt);
  const at::Tensor grad_cy = valueOr(grad_cy_opt);
  if (!grad_hy.defined() && !grad_cy.defined()) return {};
  TORCH_CHECK(workspace.dim() == 2 && cx.dim() == 2 &&
                  workspace.size(0) == cx.size(0) &&
                  workspace.size(1) == 4 * cx.size(1) &&
                  cy.sizes() == cx.sizes(),
              "_thnn_fused_lstm_cell_backward_impl: expected cx and cy of size "
              "[B, H] and a workspace of size [B, 4H], got ",
              cx.sizes(), ", ", cy.sizes(), " and ", workspace.sizes());
  for (const at::Tensor* g : {&grad_hy, &grad_cy})
    TORCH_CHECK(!g->defined() || g->sizes() == cx.sizes(),
                "_thnn_fused_lstm_cell_backward_impl: expected a gradient of "
                "size ",
                cx.sizes(), ", got ", g->sizes());
  at::Tensor grad_gates = at::empty(workspace.sizes(), workspace.options());
  at::Tensor grad_cx = at::empty(cx.sizes(), cx.options());
  launchHostKernel(
      kName, noted, 5,
      {grad_hy, grad_cy, cx, cy, workspace, grad_gates, grad_cx}, [](Built& t) {
        auto w = t[4].chunk(4, 1);
        const at::Tensor &i = w[0], &f = w[1], &c = w[2], &o = w[3];
        const at::Tensor tanh_cy = t[3].tanh();
        // The cell state's gradient: through hy (if any) and cy.
        at::Tensor gcy = at::zeros_like(t[3]);
        if (t[0].defined()) gcy = gcy + t[0] * o * tanhGrad(tanh_cy);
        if (t[1].defined()) gcy = gcy + t[1];
        const at::Tensor go = t[0].defined() ? t[0] * tanh_cy * sigmoidGrad(o)
                                             : at::zeros_like(o);
        t[5].copy_(
            at::cat({gcy * c * sigmoidGrad(i), gcy * t[2] * sigmoidGrad(f),
                     gcy * i * tanhGrad(c), go},
                    1));
        t[6].copy_(gcy * f);
      });
  at::Tensor grad_bias;
  if (has_bias) grad_bias = grad_gates.sum(0);
  return {grad_gates, grad_cx, grad_bias};
}

std::tuple<at::Tensor, at::Tensor> fusedGruCell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates,
    const at::Tensor& hx, const std::optional<at::Tensor>& input_bias_opt,
    const std::optional<at::Tensor>& hidden_bias_opt) {
  static constexpr char kName[] = "aten::_thnn_fused_gru_cell";
  static std::atomic<uint32_t> noted{0};
  AllocLabel label(kName);
  const at::Tensor input_bias = valueOr(input_bias_opt);
  const at::Tensor hidden_bias = valueOr(hidden_bias_opt);
  checkGates("_thnn_fused_gru_cell", input_gates, hidden_gates, hx, input_bias,
             hidden_bias, 3);
  at::Tensor hy = at::empty(hx.sizes(), hx.options());
  at::Tensor workspace =
      at::empty({hx.size(0), hx.size(1) * 5}, input_gates.options());
  launchHostKernel(
      kName, noted, 5,
      {input_gates, hidden_gates, hx, input_bias, hidden_bias, hy, workspace},
      [](Built& t) {
        at::Tensor ig = t[0], hg = t[1];
        if (t[3].defined()) {
          ig = ig + t[3];
          hg = hg + t[4];
        }
        auto in = ig.chunk(3, 1);
        auto hid = hg.chunk(3, 1);
        const at::Tensor r = (in[0] + hid[0]).sigmoid();
        const at::Tensor z = (in[1] + hid[1]).sigmoid();
        const at::Tensor n = (in[2] + r * hid[2]).tanh();
        t[5].copy_(n + z * (t[2] - n));
        t[6].copy_(at::cat({r, z, n, t[2], hid[2]}, 1));
      });
  return {hy, workspace};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
fusedGruCellBackward(const at::Tensor& grad_hy, const at::Tensor& workspace,
                     bool has_bias) {
  static constexpr char kName[] = "aten::_thnn_fused_gru_cell_backward";
  static std::atomic<uint32_t> noted{0};
  AllocLabel label(kName);
  TORCH_CHECK(grad_hy.dim() == 2 && workspace.dim() == 2 &&
                  workspace.size(0) == grad_hy.size(0) &&
                  workspace.size(1) == 5 * grad_hy.size(1),
              "_thnn_fused_gru_cell_backward: expected grad_hy of size [B, H] "
              "and a workspace of size [B, 5H], got ",
              grad_hy.sizes(), " and ", workspace.sizes());
  const int64_t batch = grad_hy.size(0), hidden = grad_hy.size(1);
  at::Tensor grad_input_gates =
      at::empty({batch, 3 * hidden}, workspace.options());
  at::Tensor grad_hidden_gates =
      at::empty({batch, 3 * hidden}, workspace.options());
  at::Tensor grad_hx = at::empty({batch, hidden}, workspace.options());
  launchHostKernel(
      kName, noted, 2,
      {grad_hy, workspace, grad_input_gates, grad_hidden_gates, grad_hx},
      [](Built& t) {
        auto w = t[1].chunk(5, 1);
        const at::Tensor &r = w[0], &z = w[1], &n = w[2], &hx = w[3],
                         &hn = w[4];
        const at::Tensor& go = t[0];
        const at::Tensor gz = go * (hx - n) * sigmoidGrad(z);
        const at::Tensor gn = go * (1 - z) * tanhGrad(n);
        const at::Tensor gr = gn * hn * sigmoidGrad(r);
        t[2].copy_(at::cat({gr, gz, gn}, 1));
        t[3].copy_(at::cat({gr, gz, gn * r}, 1));
        t[4].copy_(go * z);
      });
  at::Tensor grad_input_bias, grad_hidden_bias;
  if (has_bias) {
    grad_input_bias = grad_input_gates.sum(0);
    grad_hidden_bias = grad_hidden_gates.sum(0);
  }
  return {grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias,
          grad_hidden_bias};
}

}  // namespace torch_neuronx
