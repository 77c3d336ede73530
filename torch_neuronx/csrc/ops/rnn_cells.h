// The fused LSTM and GRU cells. ATen's RNN code (LSTMCell, GRUCell, LSTM,
// GRU) calls _thnn_fused_lstm_cell / _thnn_fused_gru_cell for CUDA, XPU and
// PrivateUse1 tensors and has no CPU kernel for them: without these, every
// LSTM or GRU on neuron failed. Each call is one work item computing what
// CUDA's fused kernels compute (same gates, same workspace layout, so
// autograd's formulas for the ops hold), with ATen's CPU ops on the aliases.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace torch_neuronx {

// (hy, cy, workspace): workspace holds the activated gates [i, f, g, o],
// shaped like input_gates.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fusedLstmCell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates,
    const at::Tensor& cx, const std::optional<at::Tensor>& input_bias,
    const std::optional<at::Tensor>& hidden_bias);

// (grad_gates, grad_cx, grad_bias); all undefined when neither gradient is.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fusedLstmCellBackwardImpl(
    const std::optional<at::Tensor>& grad_hy,
    const std::optional<at::Tensor>& grad_cy, const at::Tensor& cx,
    const at::Tensor& cy, const at::Tensor& workspace, bool has_bias);

// (hy, workspace): workspace is [r, z, n, hx, hidden n-gate], 5 hidden sizes
// wide.
std::tuple<at::Tensor, at::Tensor> fusedGruCell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates,
    const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
    const std::optional<at::Tensor>& hidden_bias);

// (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias,
// grad_hidden_bias).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
fusedGruCellBackward(const at::Tensor& grad_hy, const at::Tensor& workspace,
                     bool has_bias);

}  // namespace torch_neuronx
