"""torch.nn.attention.varlen.varlen_attn on neuron (TorchNeuron 2.34 runs it):
packed sequences of different lengths, through FlashAttention's ATen ops
(CUDA-only in ATen; torch_neuronx/ops/flash_attention.py), forward and
backward equal to scaled_dot_product_attention on the CPU, sequence by
sequence."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

varlen = pytest.importorskip("torch.nn.attention.varlen")

LENS_Q = [5, 17, 1, 9]
LENS_K = [7, 17, 4, 12]


def _cum(lens):
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)


def _reference(q, k, v, lens_q, lens_k, left, right):
    """Each sequence alone through the CPU's SDPA, FlashAttention's diagonal
    (bottom-right) for the window."""
    out, cq, ck = [], _cum(lens_q), _cum(lens_k)
    for i in range(len(lens_q)):
        qi, ki, vi = (t[c[i] : c[i + 1]].transpose(0, 1) for t, c in ((q, cq), (k, ck), (v, ck)))
        lq, lk = qi.shape[1], ki.shape[1]
        row = torch.arange(lq)[:, None] + (lk - lq)
        col = torch.arange(lk)[None, :]
        mask = torch.ones(lq, lk, dtype=torch.bool)
        if right >= 0:
            mask &= col <= row + right
        if left >= 0:
            mask &= col >= row - left
        o = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, enable_gqa=True)
        out.append(torch.nan_to_num(o).transpose(0, 1))  # rows seeing no key: 0
    return torch.cat(out)


@pytest.mark.parametrize(
    "window", [(-1, -1), (-1, 0), (3, 0), (2, 2)], ids=["full", "causal", "local", "band"]
)
@pytest.mark.parametrize("heads", [(4, 4), (4, 2)], ids=["mha", "gqa"])
def test_varlen_attn_equals_cpu_sdpa_per_sequence(window, heads):
    torch.manual_seed(0)
    hq, hk, d = *heads, 16
    q = torch.randn(sum(LENS_Q), hq, d, requires_grad=True)
    k = torch.randn(sum(LENS_K), hk, d, requires_grad=True)
    v = torch.randn(sum(LENS_K), hk, d, requires_grad=True)
    dq, dk, dv = (t.detach().to("neuron").requires_grad_() for t in (q, k, v))
    out = varlen.varlen_attn(
        dq,
        dk,
        dv,
        _cum(LENS_Q).to("neuron"),
        _cum(LENS_K).to("neuron"),
        max(LENS_Q),
        max(LENS_K),
        window_size=window,
        enable_gqa=hq != hk,
    )
    want = _reference(q, k, v, LENS_Q, LENS_K, *window)
    torch.testing.assert_close(out.detach().cpu(), want, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(want)
    out.backward(g.to("neuron"))
    want.backward(g)
    for got, ref in ((dq, q), (dk, k), (dv, v)):
        torch.testing.assert_close(got.grad.cpu(), ref.grad, rtol=1e-5, atol=1e-5)


def test_varlen_attn_bf16_and_lse():
    torch.manual_seed(1)
    q = torch.randn(sum(LENS_Q), 2, 32, dtype=torch.bfloat16)
    k = torch.randn(sum(LENS_K), 2, 32, dtype=torch.bfloat16)
    v = torch.randn(sum(LENS_K), 2, 32, dtype=torch.bfloat16)
    out, lse = varlen.varlen_attn(
        q.to("neuron"),
        k.to("neuron"),
        v.to("neuron"),
        _cum(LENS_Q).to("neuron"),
        _cum(LENS_K).to("neuron"),
        max(LENS_Q),
        max(LENS_K),
        return_aux=varlen.AuxRequest(lse=True),
    )
    assert out.dtype == torch.bfloat16 and lse.shape == (2, sum(LENS_Q))
    want = _reference(q.float(), k.float(), v.float(), LENS_Q, LENS_K, -1, -1)
    torch.testing.assert_close(out.cpu().float(), want, rtol=2e-2, atol=2e-2)
    # The log-sum-exp of sequence 0's first row, head 0.
    s = (q[0, 0].float() @ k[:7, 0].float().T) / 32**0.5
    torch.testing.assert_close(lse[0, 0].cpu(), torch.logsumexp(s, 0), rtol=1e-3, atol=1e-3)


def test_dense_flash_forward_equals_sdpa():
    """The dense form ([batch, seq, heads, dim], no cum_seq), causal."""
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 12, 3, 8) for _ in range(3))
    out, lse, *_ = torch.ops.aten._flash_attention_forward(
        q.to("neuron"), k.to("neuron"), v.to("neuron"), None, None, 12, 12, 0.0, True, False
    )
    want = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
    ).transpose(1, 2)
    torch.testing.assert_close(out.cpu(), want, rtol=1e-5, atol=1e-5)
    assert lse.shape == (2, 3, 12)


def test_unsupported_arguments_are_clear_errors():
    q = torch.randn(8, 2, 8, device="neuron")
    cum = torch.tensor([0, 8], dtype=torch.int32, device="neuron")
    with pytest.raises(NotImplementedError, match="dropout"):
        torch.ops.aten._flash_attention_forward(q, q, q, cum, cum, 8, 8, 0.1, False, False)
    with pytest.raises(NotImplementedError, match="block_table"):
        torch.ops.aten._flash_attention_forward(
            q, q, q, cum, cum, 8, 8, 0.0, False, False, block_table=cum
        )
    with pytest.raises(RuntimeError, match="different numbers of sequences"):
        torch.ops.aten._flash_attention_forward(q, q, q, cum, cum[:1], 8, 8, 0.0, False, False)
    # Still usable.
    out = varlen.varlen_attn(q, q, q, cum, cum, 8, 8)
    assert out.shape == q.shape


def test_varlen_attn_compiled_equals_eager():
    torch.manual_seed(3)
    q = torch.randn(sum(LENS_Q), 2, 8, device="neuron", requires_grad=True)
    kv = torch.randn(sum(LENS_K), 2, 8, device="neuron", requires_grad=True)
    cq, ck = _cum(LENS_Q).to("neuron"), _cum(LENS_K).to("neuron")

    def attn(q, kv):
        return varlen.varlen_attn(q, kv, kv, cq, ck, max(LENS_Q), max(LENS_K))

    eager = attn(q, kv)
    eager.sum().backward()
    grads = q.grad.clone(), kv.grad.clone()
    q.grad = kv.grad = None
    compiled = torch.compile(attn, backend="neuron")(q, kv)
    compiled.sum().backward()
    assert torch.equal(compiled.detach().cpu(), eager.detach().cpu())
    assert torch.equal(q.grad.cpu(), grads[0].cpu()) and torch.equal(kv.grad.cpu(), grads[1].cpu())
