"""Ops that ATen has for CUDA (or MPS) only, which code written for TorchNeuron calls
on neuron: SyncBatchNorm's statistics ops, ``linear_backward``, the native multi-head
attention's need_weights=False form; and what a missing kernel says. Each compared
with the CPU computing the same thing (plain ops, or the op's formula as CUDA's
kernel computes it). The 2-rank SyncBatchNorm training job is in
test_distributed_parallel.py.
"""

from __future__ import annotations

import pytest
import torch

D = "neuron"


def rand(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def stats_ref(x, eps):
    dims = [0] + list(range(2, x.dim()))
    xf = x.double()
    return xf.mean(dims).float(), (xf.var(dims, unbiased=False) + eps).rsqrt().float()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(6, 4), (4, 3, 5), (2, 3, 4, 5)])
def test_batch_norm_stats_and_elemt(dtype, shape):
    x = rand(*shape, dtype=dtype)
    mean, invstd = torch.batch_norm_stats(x.to(D), 1e-5)
    assert mean.dtype == invstd.dtype == torch.float32  # CUDA's accumulate type
    want_mean, want_invstd = stats_ref(x, 1e-5)
    torch.testing.assert_close(mean.cpu(), want_mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(invstd.cpu(), want_invstd, rtol=1e-5, atol=1e-6)

    w, b = rand(shape[1], seed=1), rand(shape[1], seed=2)
    out = torch.batch_norm_elemt(x.to(D), w.to(D), b.to(D), mean, invstd, 1e-5)
    assert out.dtype == dtype and out.shape == x.shape
    view = [1, -1] + [1] * (x.dim() - 2)
    want = (x.float() - want_mean.view(view)) * want_invstd.view(view) * w.view(view) + b.view(view)
    tol = {} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-2}
    torch.testing.assert_close(out.cpu(), want.to(dtype), **tol)
    # Without an affine transform; and the out= form.
    plain = torch.batch_norm_elemt(x.to(D), None, None, mean, invstd, 1e-5)
    torch.testing.assert_close(
        plain.cpu(), ((x.float() - want_mean.view(view)) * want_invstd.view(view)).to(dtype), **tol
    )
    dest = torch.empty(0, dtype=dtype, device=D)
    torch.batch_norm_elemt(x.to(D), w.to(D), b.to(D), mean, invstd, 1e-5, out=dest)
    torch.testing.assert_close(dest.cpu(), out.cpu())


def test_stats_keep_channels_last_layout():
    x = rand(2, 3, 4, 5).to(memory_format=torch.channels_last)
    mean, invstd = torch.batch_norm_stats(x.to(D), 1e-3)
    out = torch.batch_norm_elemt(x.to(D), None, None, mean, invstd, 1e-3)
    assert out.is_contiguous(memory_format=torch.channels_last)
    want = torch.batch_norm(x, None, None, None, None, True, 0, 1e-3, False)
    torch.testing.assert_close(out.cpu(), want)


@pytest.mark.parametrize("with_running", [True, False])
def test_gather_stats_merge_ranks_as_one_batch(with_running):
    # Three "ranks" of unequal sizes: merged statistics equal the whole batch's.
    parts = [rand(n, 4, 3, seed=n) for n in (2, 5, 3)]
    whole = torch.cat(parts)
    stats = [torch.batch_norm_stats(p.to(D), 1e-5) for p in parts]
    mean_all = torch.stack([m for m, _ in stats])
    invstd_all = torch.stack([s for _, s in stats])
    counts = torch.tensor([p.numel() / p.size(1) for p in parts], device=D)
    rm, rv = torch.zeros(4, device=D), torch.ones(4, device=D)
    mean, invstd = torch.batch_norm_gather_stats_with_counts(
        whole.to(D),
        mean_all,
        invstd_all,
        rm if with_running else None,
        rv if with_running else None,
        0.1,
        1e-5,
        counts,
    )
    want_mean, want_invstd = stats_ref(whole, 1e-5)
    torch.testing.assert_close(mean.cpu(), want_mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(invstd.cpu(), want_invstd, rtol=1e-5, atol=1e-5)
    if with_running:  # BatchNorm's update: unbiased variance, momentum 0.1
        crm, crv = torch.zeros(4), torch.ones(4)
        torch.batch_norm(whole, None, None, crm, crv, True, 0.1, 1e-5, False)
        torch.testing.assert_close(rm.cpu(), crm, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(rv.cpu(), crv, rtol=1e-5, atol=1e-5)
    # One count for every rank.
    equal = torch.batch_norm_gather_stats(
        whole.to(D),
        mean_all[:1].repeat(2, 1),
        invstd_all[:1].repeat(2, 1),
        None,
        None,
        0.1,
        1e-5,
        6,
    )
    torch.testing.assert_close(equal[0].cpu(), mean_all[0].cpu())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_backward_reduce_and_elemt_equal_batch_norms_gradient(dtype):
    x = rand(6, 4, 5, dtype=dtype)
    w = rand(4, seed=3)
    dy = rand(6, 4, 5, dtype=dtype, seed=4)
    mean, invstd = torch.batch_norm_stats(x.to(D), 1e-5)
    sum_dy, sum_dy_xmu, gw, gb = torch.batch_norm_backward_reduce(
        dy.to(D), x.to(D), mean, invstd, w.to(D), True, True, True
    )
    count = torch.tensor([30], dtype=torch.int32, device=D)
    gx = torch.batch_norm_backward_elemt(
        dy.to(D), x.to(D), mean, invstd, w.to(D), sum_dy, sum_dy_xmu, count
    )
    assert gx.dtype == dtype and gw.dtype == gb.dtype == torch.float32

    xr = x.float().requires_grad_()
    wr = w.clone().requires_grad_()
    br = torch.zeros(4, requires_grad=True)
    out = torch.batch_norm(xr, wr, br, None, None, True, 0.1, 1e-5, False)
    out.backward(dy.float())
    tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(gx.cpu().float(), xr.grad, **tol)
    torch.testing.assert_close(gw.cpu(), wr.grad, **tol)
    torch.testing.assert_close(gb.cpu(), br.grad, **tol)
    # Only what is asked for is returned.
    partial = torch.batch_norm_backward_reduce(
        dy.to(D), x.to(D), mean, invstd, None, False, False, True
    )
    assert partial[0] is None and partial[1] is None and partial[2] is None
    torch.testing.assert_close(partial[3].cpu(), br.grad, **tol)


def test_bad_arguments_raise_at_the_call():
    x = torch.randn(4, 3, device=D)
    with pytest.raises(RuntimeError, match="expected an input with a channel dim"):
        torch.batch_norm_stats(torch.randn(4, device=D), 1e-5)
    mean, invstd = torch.batch_norm_stats(x, 1e-5)
    with pytest.raises(RuntimeError, match=r"expected weight of size \[3\]"):
        torch.batch_norm_elemt(x, torch.ones(5, device=D), None, mean, invstd, 1e-5)
    with pytest.raises(RuntimeError, match="one count per rank"):
        torch.batch_norm_gather_stats_with_counts(
            x, mean[None], invstd[None], None, None, 0.1, 1e-5, torch.ones(2, device=D)
        )
    assert torch.batch_norm_stats(x, 1e-5)[0].cpu().shape == (3,)  # still usable


def test_linear_backward_equals_linears_autograd():
    for shape in [(5, 4), (2, 3, 4), (4,)]:
        x = rand(*shape)
        w, b = rand(3, 4, seed=1), rand(3, seed=2)
        go = rand(*shape[:-1], 3, seed=3)
        xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
        torch.nn.functional.linear(xr, wr, br).backward(go)
        gi, gw, gb = torch.ops.aten.linear_backward(x.to(D), go.to(D), w.to(D), [True, True, True])
        torch.testing.assert_close(gi.cpu(), xr.grad)
        torch.testing.assert_close(gw.cpu(), wr.grad)
        torch.testing.assert_close(gb.cpu(), br.grad)
        mask = [True, False, False]
        only_input = torch.ops.aten.linear_backward(x.to(D), go.to(D), w.to(D), mask)
        assert only_input[1] is None and only_input[2] is None
    with pytest.raises(RuntimeError, match="last dim is in_features"):
        torch.ops.aten.linear_backward(
            torch.randn(2, 5, device=D),
            torch.randn(2, 3, device=D),
            torch.randn(3, 4, device=D),
            [True, True, True],
        )


@pytest.mark.parametrize("need_weights", [False, True])
def test_native_multi_head_attention(need_weights):
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    q = rand(2, 5, 8)
    args = (8, 2, mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias)
    with torch.no_grad():
        want = torch._native_multi_head_attention(q, q, q, *args, need_weights=need_weights)
        dev_args = [a.to(D) if isinstance(a, torch.Tensor) else a for a in args]
        got = torch._native_multi_head_attention(
            q.to(D), q.to(D), q.to(D), *dev_args, need_weights=need_weights
        )
    torch.testing.assert_close(got[0].cpu(), want[0])
    if need_weights:
        torch.testing.assert_close(got[1].cpu(), want[1])
    else:  # no weights, as on the CPU (and CUDA)
        assert want[1] is None and got[1] is None


def test_transformer_encoder_fast_path_in_eval():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0).eval()
    x = rand(2, 6, 16)
    with torch.no_grad():
        want = layer(x)
        got = layer.to(D)(x.to(D))
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


def test_pin_memory_is_ignored_for_device_tensors():
    t = torch.scalar_tensor(1.5, device=D, pin_memory=True)
    assert t.device.type == "neuron" and t.item() == 1.5
    assert torch.empty(3, device=D, pin_memory=True).shape == (3,)
    assert torch.empty(3, pin_memory=True).is_pinned()  # the CPU still pins


def test_an_op_without_any_kernel_names_neuron_not_the_cpu():
    q = torch.randn(1, 4, 2, 8, device=D)
    with pytest.raises(NotImplementedError) as e:
        torch.ops.aten._efficient_attention_forward(q, q, q, None, None, None, 4, 4, 0.0, 0)
    msg = str(e.value)
    assert "'aten::_efficient_attention_forward'" in msg and "'neuron' backend" in msg
    assert "not supported on neuron" in msg and "'CPU' backend" not in msg
    assert (q + 1).sum().item() == pytest.approx((q.cpu() + 1).sum().item(), rel=1e-5)


def test_a_cpu_tensor_mixed_with_neuron_keeps_torchs_message_and_names_neuron():
    a = torch.ones(3, device=D)
    with pytest.raises(RuntimeError) as e:
        a + torch.ones(3)
    msg = str(e.value)
    assert "Expected all tensors to be on the same device" in msg
    assert "is on cpu device, expected neuron" in msg
    with pytest.raises(RuntimeError, match="argument 'index' is on cpu device, expected neuron"):
        torch.index_select(a, 0, torch.tensor([0, 1]))
    # A 0-dim CPU tensor is a scalar, as on CUDA.
    assert (a + torch.tensor(2.0)).cpu().tolist() == [3.0, 3.0, 3.0]
