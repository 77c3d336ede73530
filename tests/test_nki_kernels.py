"""The NKI kernel library against torch references on random shapes, and the
ATen operators routed to it on neuron (SDPA, rms_norm)."""

import math

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx
from torch_neuronx.nki import kernels

GEN = torch.Generator().manual_seed(0)


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=GEN).to(dtype)


def rel_err(a, b):
    a, b = a.detach().cpu().float(), b.detach().float()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-6)).item()


TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2}

ATTN_SHAPES = [  # B, H, KVH, S, Sk, D
    (1, 2, 2, 128, 128, 64),
    (2, 4, 2, 256, 512, 32),
    (1, 3, 1, 384, 384, 128),
    (1, 2, 2, 512, 1024, 80),
]


@pytest.mark.parametrize("shape", ATTN_SHAPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_flash_attention_forward_and_backward(shape, causal, dtype):
    B, H, KVH, S, Sk, D = shape
    if causal and S != Sk:
        pytest.skip("causal attention here is for equal lengths")
    q = randn(B, H, S, D, dtype=dtype).requires_grad_()
    k = randn(B, KVH, Sk, D, dtype=dtype).requires_grad_()
    v = randn(B, KVH, Sk, D, dtype=dtype).requires_grad_()
    do = randn(B, H, S, D, dtype=dtype)
    qn, kn, vn, don = (t.detach().to("neuron") for t in (q, k, v, do))
    scale = 0.5 / math.sqrt(D)
    o, lse = kernels.flash_attention_fwd[B, H](qn, kn, vn, softmax_scale=scale, causal=causal)
    kk = k.float().repeat_interleave(H // KVH, 1)
    vv = v.float().repeat_interleave(H // KVH, 1)
    ref = F.scaled_dot_product_attention(q.float(), kk, vv, is_causal=causal, scale=scale)
    assert rel_err(o, ref) < TOL[dtype]
    s = (q.float() @ kk.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(torch.ones(S, Sk, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(
        lse.cpu(),
        torch.logsumexp(s, -1).detach(),
        rtol=1e-3,
        atol=1e-3 if dtype == torch.float32 else 5e-2,
    )
    dq, dk, dv = kernels.flash_attention_bwd[B, KVH](
        qn, kn, vn, o, don, lse, softmax_scale=scale, causal=causal
    )
    ref.backward(do.float())
    for got, want in ((dq, q.grad), (dk, k.grad), (dv, v.grad)):
        assert got.dtype == dtype
        assert rel_err(got, want) < TOL[dtype] * 2


@pytest.mark.parametrize("rows,cols", [(1, 64), (300, 256), (128, 1000)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("with_weight", [True, False])
def test_rmsnorm_forward_and_backward(rows, cols, dtype, with_weight):
    x = randn(rows, cols, dtype=dtype).requires_grad_()
    w = randn(cols, dtype=dtype).requires_grad_() if with_weight else None
    dy = randn(rows, cols, dtype=dtype)
    wn = w.detach().to("neuron") if with_weight else None
    y, rstd = kernels.rmsnorm_fwd(x.detach().to("neuron"), wn, eps=1e-5)
    ref = F.rms_norm(x.float(), (cols,), w.float() if with_weight else None, 1e-5)
    assert rel_err(y, ref) < TOL[dtype]
    torch.testing.assert_close(
        rstd.cpu(), torch.rsqrt(x.float().pow(2).mean(-1) + 1e-5).detach(), rtol=1e-5, atol=1e-5
    )
    dx, dw = kernels.rmsnorm_bwd(dy.to("neuron"), x.detach().to("neuron"), rstd, wn)
    ref.backward(dy.float())
    assert rel_err(dx, x.grad) < TOL[dtype] * 2
    if with_weight:
        assert rel_err(dw, w.grad) < TOL[dtype] * 2
    else:
        assert dw is None


@pytest.mark.parametrize("rows,cols", [(5, 7), (200, 512), (128, 3000)])
def test_softmax(rows, cols):
    x = randn(rows, cols) * 4
    assert rel_err(kernels.softmax_fwd(x.to("neuron")), x.softmax(-1)) < 1e-5


@pytest.mark.parametrize("k,m,n", [(128, 128, 512), (384, 256, 1024)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tiled_matmul(k, m, n, dtype):
    a, b = randn(k, m, dtype=dtype), randn(k, n, dtype=dtype)
    out = kernels.tiled_matmul(a.to("neuron"), b.to("neuron"))
    assert out.dtype == dtype
    assert rel_err(out, a.float().T @ b.float()) < TOL[dtype]


@pytest.mark.parametrize("rows,cols", [(1, 64), (300, 384), (128, 1100)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("affine", [True, False])
def test_layernorm_forward_and_backward(rows, cols, dtype, affine):
    x = (randn(rows, cols) * 3 + 1).to(dtype).requires_grad_()
    w = randn(cols, dtype=dtype).requires_grad_() if affine else None
    b = randn(cols, dtype=dtype).requires_grad_() if affine else None
    dy = randn(rows, cols, dtype=dtype)

    def dev(t):
        return t.detach().to("neuron") if t is not None else None

    y, mean, rstd = kernels.layernorm_fwd(dev(x), dev(w), dev(b), eps=1e-5)
    ref = F.layer_norm(
        x.float(), (cols,), w.float() if affine else None, b.float() if affine else None, 1e-5
    )
    assert rel_err(y, ref) < TOL[dtype]
    torch.testing.assert_close(mean.cpu(), x.float().mean(-1).detach(), rtol=1e-4, atol=1e-5)
    dx, dw, db = kernels.layernorm_bwd(
        dy.to("neuron"), dev(x), mean, rstd, dev(w), with_bias=affine
    )
    ref.backward(dy.float())
    assert rel_err(dx, x.grad) < TOL[dtype] * 2
    if affine:
        assert rel_err(dw, w.grad) < TOL[dtype] * 2
        assert rel_err(db, b.grad) < TOL[dtype] * 2
    else:
        assert dw is None and db is None


@pytest.mark.parametrize("rows,d", [(7, 16), (300, 128)])
def test_rope(rows, d):
    x, c, s = randn(rows, d), randn(rows, d // 2), randn(rows, d // 2)
    h = d // 2
    ref = torch.cat([x[:, :h] * c - x[:, h:] * s, x[:, h:] * c + x[:, :h] * s], 1)
    out = kernels.rope_fwd(x.to("neuron"), c.to("neuron"), s.to("neuron"))
    assert rel_err(out, ref) < 1e-6
    # The inverse rotation (the backward pass) brings x back.
    back = kernels.rope_fwd(out, c.to("neuron"), (-s).to("neuron"))
    cs = torch.cat([c, c], 1).square() + torch.cat([s, s], 1).square()
    assert rel_err(back, x * cs) < 1e-5


@pytest.mark.parametrize("n,h,i", [(50, 128, 256), (200, 256, 640)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_swiglu_mlp(n, h, i, dtype):
    x = randn(n, h, dtype=dtype)
    wg, wu, wd = (
        randn(h, i, dtype=dtype) / 16,
        randn(h, i, dtype=dtype) / 16,
        randn(i, h, dtype=dtype) / 16,
    )
    ref = (F.silu(x.float() @ wg.float()) * (x.float() @ wu.float())) @ wd.float()
    out = kernels.swiglu_mlp(*(t.to("neuron") for t in (x, wg, wu, wd)))
    assert rel_err(out, ref) < TOL[dtype] * 2


@pytest.mark.parametrize("groups", [(70, 0, 130, 100), (128, 256), (1,)])
def test_moe_grouped_matmul(groups):
    T = sum(groups)
    x = randn(T, 256)
    w = randn(len(groups), 256, 600)
    bounds = [sum(groups[:e]) for e in range(len(groups) + 1)]
    ref = torch.cat([x[bounds[e] : bounds[e + 1]] @ w[e] for e in range(len(groups))])
    out = kernels.grouped_matmul(x.to("neuron"), w.to("neuron"), groups)
    assert rel_err(out, ref) < 1e-5


# Routing of ATen operators -------------------------------------------------------
def nki_ops():
    return {o for o in torch_neuronx.get_executed_ops() if o.startswith("nki::")}


@pytest.fixture
def fresh_tracking():
    torch_neuronx.clear_op_tracking()
    yield


@pytest.fixture
def nki_attention(monkeypatch, fresh_tracking):
    # Attention runs the flash kernels only when asked (the CPU's fused kernel
    # computes it by default: nki/aten_routing.py).
    monkeypatch.setenv("TORCH_NEURONX_SIMULATE_NKI_ATTENTION", "1")
    torch._dynamo.reset()  # graphs traced with the other routing
    yield
    torch._dynamo.reset()


def test_sdpa_runs_the_flash_kernels_when_shapes_fit(nki_attention):
    q = randn(2, 4, 256, 64).requires_grad_()
    k = randn(2, 2, 256, 64).requires_grad_()
    v = randn(2, 2, 256, 64).requires_grad_()
    qn, kn, vn = (t.detach().to("neuron").requires_grad_() for t in (q, k, v))
    o = F.scaled_dot_product_attention(qn, kn, vn, is_causal=True, enable_gqa=True)
    o.square().sum().backward()
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    ref.square().sum().backward()
    assert rel_err(o, ref) < 1e-5
    for got, want in ((qn.grad, q.grad), (kn.grad, k.grad), (vn.grad, v.grad)):
        assert rel_err(got, want) < 1e-4
    assert {"nki::flash_attention_fwd", "nki::flash_attention_bwd"} <= nki_ops()


def test_sdpa_keeps_the_query_layout(nki_attention):
    x = randn(1, 128, 2, 32).to("neuron")  # (B, S, H, D) viewed as (B, H, S, D)
    q = x.transpose(1, 2)
    o = F.scaled_dot_product_attention(q, q, q)
    assert "nki::flash_attention_fwd" in nki_ops()
    assert o.stride() == q.stride()
    assert rel_err(o, F.scaled_dot_product_attention(*(q.cpu(),) * 3)) < 1e-5


@pytest.mark.parametrize(
    "case", ["mask", "dropout", "seq_100", "head_256", "fp16", "causal_unequal"]
)
def test_sdpa_takes_math_when_shapes_do_not_fit(case, nki_attention):
    B, H, S, D, dtype = 1, 2, 128, 32, torch.float32
    kw = {}
    Sk = S
    if case == "seq_100":
        S = Sk = 100
    if case == "head_256":
        D = 256
    if case == "fp16":
        dtype = torch.float16
    if case == "causal_unequal":
        Sk, kw = 256, {"is_causal": True}
    q, k, v = (
        randn(B, H, S, D, dtype=dtype),
        randn(B, H, Sk, D, dtype=dtype),
        randn(B, H, Sk, D, dtype=dtype),
    )
    if case == "mask":
        kw = {"attn_mask": torch.ones(S, Sk, dtype=torch.bool).tril()}
    if case == "dropout":
        kw = {"dropout_p": 0.0}  # exactly zero still fits; a real dropout does not
        o = F.scaled_dot_product_attention(*(t.to("neuron") for t in (q, k, v)), **kw)
        assert "nki::flash_attention_fwd" in nki_ops()
        torch_neuronx.clear_op_tracking()
        kw = {"dropout_p": 0.5}
        F.scaled_dot_product_attention(*(t.to("neuron") for t in (q, k, v)), **kw)
        assert "nki::flash_attention_fwd" not in nki_ops()
        return
    kwn = {n: (t.to("neuron") if isinstance(t, torch.Tensor) else t) for n, t in kw.items()}
    o = F.scaled_dot_product_attention(*(t.to("neuron") for t in (q, k, v)), **kwn)
    assert "nki::flash_attention_fwd" not in nki_ops()
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), **kw)
    assert rel_err(o, ref) < (1e-2 if dtype == torch.float16 else 1e-5)


def test_attention_runs_the_cpus_fused_kernel_by_default(monkeypatch, fresh_tracking):
    # Shapes the flash kernels fit: without TORCH_NEURONX_SIMULATE_NKI_ATTENTION the
    # CPU's fused kernel computes them, with the CPU's results bitwise.
    monkeypatch.delenv("TORCH_NEURONX_SIMULATE_NKI_ATTENTION", raising=False)
    q, k, v = (randn(2, 4, 256, 64).requires_grad_() for _ in range(3))
    qn, kn, vn = (t.detach().to("neuron").requires_grad_() for t in (q, k, v))
    o = F.scaled_dot_product_attention(qn, kn, vn, is_causal=True)
    o.square().sum().backward()
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ref.square().sum().backward()
    assert not nki_ops()
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in torch_neuronx.get_executed_ops()
    assert torch.equal(o.detach().cpu(), ref.detach())
    for got, want in ((qn.grad, q.grad), (kn.grad, k.grad), (vn.grad, v.grad)):
        assert torch.equal(got.cpu(), want)


def test_env_var_turns_the_routing_off(monkeypatch, nki_attention):
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_NKI_KERNELS", "1")
    q = randn(1, 2, 128, 32).to("neuron")
    F.scaled_dot_product_attention(q, q, q)
    F.rms_norm(q, (32,))
    assert not nki_ops()


def test_sdpa_under_compile_runs_the_flash_kernels(nki_attention):
    q = randn(1, 2, 256, 64).to("neuron").requires_grad_()

    def f(q):
        return F.scaled_dot_product_attention(q, q, q, is_causal=True).sum()

    # Compiled graphs are cached by graph, not by the routing: compile anew.
    with torch._inductor.config.patch(force_disable_caches=True):
        torch._dynamo.reset()
        loss = torch.compile(f, backend="neuron", fullgraph=True)(q)
    loss.backward()
    qc = q.detach().cpu().requires_grad_()
    ref = f(qc)
    ref.backward()
    assert abs(loss.item() - ref.item()) < 1e-3
    assert rel_err(q.grad, qc.grad) < 1e-4
    assert {"nki::flash_attention_fwd", "nki::flash_attention_bwd"} <= nki_ops()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_runs_the_kernel(dtype, fresh_tracking):
    x = randn(4, 50, 96, dtype=dtype).requires_grad_()
    w = randn(96, dtype=dtype).requires_grad_()
    xn, wn = (t.detach().to("neuron").requires_grad_() for t in (x, w))
    y = F.rms_norm(xn, (96,), wn, eps=1e-6)
    (y.float() * torch.arange(96, device="neuron")).sum().backward()
    ref = F.rms_norm(x, (96,), w, eps=1e-6)
    (ref.float() * torch.arange(96)).sum().backward()
    assert y.dtype == dtype
    assert rel_err(y, ref) < TOL[dtype]
    assert rel_err(xn.grad, x.grad) < TOL[dtype] * 2
    assert rel_err(wn.grad, w.grad) < TOL[dtype] * 4
    assert {"nki::rmsnorm_fwd", "nki::rmsnorm_bwd"} <= nki_ops()
    assert "aten::_fused_rms_norm" in torch_neuronx.get_executed_ops()
