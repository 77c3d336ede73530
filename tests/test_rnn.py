"""LSTM and GRU on neuron: ATen calls the fused cells (_thnn_fused_lstm_cell,
_thnn_fused_gru_cell) for every device but the CPU; results and gradients must
equal the CPU's."""

import copy

import pytest
import torch
from device_trace import trace_labels
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.utils._pytree import tree_leaves, tree_map

DEV = "neuron"


def run_both(module, *inputs):
    """Forward and backward of `module` on the CPU and of a copy on neuron; returns
    (cpu outputs, neuron outputs, cpu module, neuron module, cpu inputs, neuron inputs)."""
    torch.manual_seed(0)
    dev_module = copy.deepcopy(module).to(DEV)
    cpu_in = tree_map(lambda t: t.clone().requires_grad_(), list(inputs))
    dev_in = tree_map(lambda t: t.detach().to(DEV).requires_grad_(), list(inputs))
    cpu_out, dev_out = tree_leaves(module(*cpu_in)), tree_leaves(dev_module(*dev_in))
    # Weight each output differently so that every output's gradient matters.
    sum(o.sum() * (k + 1) for k, o in enumerate(cpu_out)).backward()
    sum(o.sum() * (k + 1) for k, o in enumerate(dev_out)).backward()
    return cpu_out, dev_out, module, dev_module, cpu_in, dev_in


def assert_same(cpu_out, dev_out, module, dev_module, cpu_in, dev_in):
    assert len(cpu_out) == len(dev_out)
    for a, b in zip(cpu_out, dev_out, strict=True):
        assert b.device.type == DEV
        torch.testing.assert_close(b.cpu(), a)
    for (name, p), q in zip(module.named_parameters(), dev_module.parameters(), strict=True):
        torch.testing.assert_close(q.grad.cpu(), p.grad, msg=name)
    for a, b in zip(tree_leaves(cpu_in), tree_leaves(dev_in), strict=True):
        torch.testing.assert_close(b.grad.cpu(), a.grad)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("cell", [torch.nn.LSTMCell, torch.nn.GRUCell])
def test_cells_match_the_cpu(cell, bias):
    x = torch.randn(3, 5)
    assert_same(*run_both(cell(5, 7, bias=bias), x))
    state = torch.randn(3, 7)
    given = (state, torch.randn(3, 7)) if cell is torch.nn.LSTMCell else state
    assert_same(*run_both(cell(5, 7, bias=bias), x, given))


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.nn.LSTM(5, 7, num_layers=2, bidirectional=True),
        lambda: torch.nn.LSTM(5, 7, batch_first=True, proj_size=3),
        lambda: torch.nn.GRU(5, 7, num_layers=2, bidirectional=True),
        lambda: torch.nn.GRU(5, 7, batch_first=True, bias=False),
        lambda: torch.nn.LSTM(5, 7).double(),
    ],
    ids=[
        "lstm-2-layers-bidirectional",
        "lstm-proj",
        "gru-2-layers-bidirectional",
        "gru-no-bias",
        "lstm-float64",
    ],
)
def test_rnn_modules_match_the_cpu(make):
    module = make()
    dtype = next(module.parameters()).dtype
    assert_same(*run_both(module, torch.randn(4, 3, 5, dtype=dtype)))


def test_packed_sequences():
    lstm = torch.nn.LSTM(5, 7, batch_first=True)
    dev_lstm = copy.deepcopy(lstm).to(DEV)
    seq, lengths = torch.randn(3, 6, 5), torch.tensor([6, 4, 2])
    out, (h, c) = lstm(pack_padded_sequence(seq, lengths, batch_first=True))
    dev_out, (dh, dc) = dev_lstm(pack_padded_sequence(seq.to(DEV), lengths, batch_first=True))
    torch.testing.assert_close(
        pad_packed_sequence(dev_out, batch_first=True)[0].cpu(),
        pad_packed_sequence(out, batch_first=True)[0],
    )
    torch.testing.assert_close(dh.cpu(), h)
    torch.testing.assert_close(dc.cpu(), c)


@pytest.mark.parametrize("used", [0, 1], ids=["hy-only", "cy-only"])
def test_lstm_cell_gradient_through_one_output(used):
    # The other output's gradient reaches the backward as undefined.
    cell = torch.nn.LSTMCell(5, 7)
    dev_cell = copy.deepcopy(cell).to(DEV)
    x = torch.randn(3, 5)
    cell(x)[used].sum().backward()
    dev_cell(x.to(DEV))[used].sum().backward()
    for p, q in zip(cell.parameters(), dev_cell.parameters(), strict=True):
        torch.testing.assert_close(q.grad.cpu(), p.grad)


def test_second_derivatives():
    torch.manual_seed(0)
    lstm = torch.nn.LSTMCell(3, 4).double().to(DEV)
    gru = torch.nn.GRUCell(3, 4).double().to(DEV)
    x = torch.randn(2, 3, dtype=torch.double, device=DEV, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda x: lstm(x)[0] * lstm(x)[1], (x,))
    assert torch.autograd.gradgradcheck(gru, (x,))


def test_a_cell_is_one_work_item():
    # The cell's gates, state and workspace in one item (a composite would be ~15).
    cell = torch.nn.LSTMCell(5, 7).to(DEV)
    x = torch.randn(3, 5, device=DEV)
    labels = trace_labels(lambda: cell(x))
    assert labels.count("aten::_thnn_fused_lstm_cell") == 1, labels
    assert len(labels) <= 4, labels  # the two gate matmuls, zero states, the cell


def test_bad_gate_sizes_are_an_error_and_the_device_stays_usable():
    gates = torch.randn(3, 8, device=DEV)
    with pytest.raises(RuntimeError, match=r"previous hidden state to be \[3, 2\].*got \[3, 3\]"):
        torch.ops.aten._thnn_fused_lstm_cell(gates, gates, torch.randn(3, 3, device=DEV))
    with pytest.raises(RuntimeError, match="same size"):
        h = torch.randn(3, 2, device=DEV)
        torch.ops.aten._thnn_fused_gru_cell(gates[:, :6], torch.randn(3, 9, device=DEV), h)
    with pytest.raises(RuntimeError, match="same device|Expected all tensors"):
        torch.ops.aten._thnn_fused_gru_cell(gates[:, :6], gates[:, :6], torch.randn(3, 2))
    torch.testing.assert_close((torch.ones(2, device=DEV) * 2).cpu(), torch.full((2,), 2.0))


def lstm_cell_in_float(ig, hg, cx, ib, hb):
    i, f, g, o = (ig.float() + hg.float() + ib.float() + hb.float()).chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx.float() + i * g
    return o * cy.tanh(), cy, torch.cat([i, f, g, o], 1)


def gru_cell_in_float(ig, hg, hx, ib, hb):
    xr, xz, xn = (ig.float() + ib.float()).chunk(3, 1)
    hr, hz, hn = (hg.float() + hb.float()).chunk(3, 1)
    r, z = (xr + hr).sigmoid(), (xz + hz).sigmoid()
    n = (xn + r * hn).tanh()
    return n + z * (hx.float() - n), torch.cat([r, z, n, hx.float(), hn], 1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "op, reference, gates",
    [
        (torch.ops.aten._thnn_fused_lstm_cell, lstm_cell_in_float, 4),
        (torch.ops.aten._thnn_fused_gru_cell, gru_cell_in_float, 3),
    ],
    ids=["lstm", "gru"],
)
def test_reduced_precision_cells_compute_in_float(op, reference, gates, dtype):
    # As CUDA's fused kernels: the gates in float, each result rounded once.
    torch.manual_seed(0)
    hidden = 32
    args = [
        torch.randn(8, gates * hidden, dtype=dtype),
        torch.randn(8, gates * hidden, dtype=dtype),
        torch.randn(8, hidden, dtype=dtype),
        torch.randn(gates * hidden, dtype=dtype),
        torch.randn(gates * hidden, dtype=dtype),
    ]
    got = op(*[a.to(DEV) for a in args])
    for r, g in zip(reference(*args), got, strict=True):
        assert g.dtype == dtype
        torch.testing.assert_close(g.cpu(), r.to(dtype), atol=0, rtol=0)
