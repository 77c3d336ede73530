"""FlexAttention on neuron (eager): score and block masks, forward and backward.

torch's ``flex_attention`` admits only its own device list; torch_neuronx admits
neuron tensors to its unfused path (flex_attention_support.py). Forward equals the
CPU's; the backward (which the CPU refuses: "FlexAttention does not support
backward on CPU") equals plain PyTorch attention with the same bias and mask.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

D = "neuron"
B, H, S, E = 2, 2, 64, 16


def relative_bias(score, b, h, q_idx, kv_idx):
    return score + (q_idx - kv_idx) * 0.05


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def reference(q, k, v, bias: bool, mask: bool):
    """Plain attention with the same score modification and mask."""
    scores = q @ k.transpose(-2, -1) / E**0.5
    idx = torch.arange(S, device=q.device)
    if bias:
        scores = scores + (idx[:, None] - idx[None, :]) * 0.05
    if mask:
        scores = scores.masked_fill(idx[:, None] < idx[None, :], float("-inf"))
    return scores.softmax(-1) @ v


def inputs(device, requires_grad=False):
    g = torch.Generator().manual_seed(0)
    return [
        torch.randn(B, H, S, E, generator=g).to(device).requires_grad_(requires_grad)
        for _ in range(3)
    ]


@pytest.mark.parametrize("bias, mask", [(True, False), (False, True), (True, True)])
def test_forward_equals_the_cpus(bias, mask):
    def run(device):
        q, k, v = inputs(device)
        block_mask = create_block_mask(causal, B, H, S, S, device=device) if mask else None
        return flex_attention(
            q, k, v, score_mod=relative_bias if bias else None, block_mask=block_mask
        )

    out = run(D)
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), run("cpu"))
    plain = reference(*inputs("cpu"), bias, mask)
    torch.testing.assert_close(out.cpu(), plain, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("bias, mask", [(True, False), (True, True)])
def test_backward_equals_plain_attention(bias, mask):
    q, k, v = inputs(D, requires_grad=True)
    block_mask = create_block_mask(causal, B, H, S, S, device=D) if mask else None
    out = flex_attention(q, k, v, score_mod=relative_bias if bias else None, block_mask=block_mask)
    out.square().sum().backward()

    qr, kr, vr = inputs("cpu", requires_grad=True)
    ref = reference(qr, kr, vr, bias, mask)
    ref.square().sum().backward()
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), atol=1e-5, rtol=1e-4)
    for got, want in ((q.grad, qr.grad), (k.grad, kr.grad), (v.grad, vr.grad)):
        torch.testing.assert_close(got.cpu(), want, atol=1e-4, rtol=1e-3)


def test_other_devices_keep_torchs_checks():
    # The shim admits neuron only: the CPU still refuses a backward, as upstream.
    q, k, v = inputs("cpu", requires_grad=True)
    with pytest.raises(NotImplementedError, match="does not support backward on CPU"):
        flex_attention(q, k, v)
