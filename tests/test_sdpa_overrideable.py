"""``sdpa_kernel(SDPBackend.OVERRIDEABLE)``: PyTorch's attention backend slot for
PrivateUse1 devices, the one code written for TorchNeuron selects. On neuron it runs
``_scaled_dot_product_fused_attention_overrideable`` and its backward for any inputs
(nki/aten_routing.py), eager and compiled, with the CPU's numbers: the CPU's fused
kernel where it applies, the math composite otherwise (masks, grouped query heads,
dropout drawn from the neuron generator and drawn again in the backward).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

D = "neuron"
OVERRIDEABLE = 4


def make(shape_q, shape_kv, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*shape_q, generator=g).to(dtype)
    k = torch.randn(*shape_kv, generator=g).to(dtype)
    v = torch.randn(*shape_kv, generator=g).to(dtype)
    return q, k, v


CASES = {
    "plain": dict(),
    "causal": dict(is_causal=True),
    "float_mask": dict(mask="float"),
    "bool_mask": dict(mask="bool"),
    "scale": dict(scale=0.3),
    "gqa": dict(gqa=True),
    "dropout": dict(dropout_p=0.3),
}


def run(device, compiled, case, dtype=torch.float32, transposed=False):
    kv_heads = 1 if case.get("gqa") else 2
    q, k, v = make((2, 2, 16, 8), (2, kv_heads, 12 if not case.get("is_causal") else 16, 8), dtype)
    mask = None
    if case.get("mask") == "float":
        mask = torch.randn(1, 1, 16, k.size(2), generator=torch.Generator().manual_seed(5))
        mask = mask.to(dtype).to(device)
    elif case.get("mask") == "bool":
        mask = (torch.arange(16)[:, None] >= torch.arange(k.size(2))[None, :] - 3).to(device)
    leaves = [t.to(device).requires_grad_() for t in (q, k, v)]
    args = leaves
    if transposed:  # TorchTitan's layout: [B, L, H, E] storage, transposed views
        args = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in leaves]
    kwargs = dict(
        attn_mask=mask,
        dropout_p=case.get("dropout_p", 0.0),
        is_causal=case.get("is_causal", False),
        scale=case.get("scale"),
        enable_gqa=bool(case.get("gqa")),
    )

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)

    fn = torch.compile(attend, backend="neuron", fullgraph=True) if compiled else attend
    torch.manual_seed(7)
    if device == D:
        with sdpa_kernel(SDPBackend.OVERRIDEABLE):
            out = fn(*args)
    else:
        out = fn(*args)
    out.float().square().sum().backward()
    return out.detach().cpu(), [t.grad.cpu() for t in leaves]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_overrideable_equals_the_cpu(case, compiled):
    torch._dynamo.reset()
    want, want_grads = run("cpu", False, CASES[case])
    got, got_grads = run(D, compiled, CASES[case])
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_bfloat16_and_transposed_inputs(compiled):
    torch._dynamo.reset()
    want, want_grads = run("cpu", False, {}, torch.bfloat16, transposed=True)
    got, got_grads = run(D, compiled, {}, torch.bfloat16, transposed=True)
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, atol=5e-2, rtol=5e-2)


def test_the_choice_and_the_executed_op():
    import torch_neuronx

    q, k, v = (t.to(D) for t in make((1, 2, 8, 4), (1, 2, 8, 4)))
    assert torch._fused_sdp_choice(q, k, v) == 0  # math by default (the CPU's kernel runs)
    with sdpa_kernel(SDPBackend.OVERRIDEABLE):
        assert torch._fused_sdp_choice(q, k, v) == OVERRIDEABLE
        torch_neuronx.clear_op_tracking()
        F.scaled_dot_product_attention(q, k, v)
        executed = torch_neuronx.get_executed_ops()
    assert any("_scaled_dot_product_fused_attention_overrideable" in op for op in executed)


def test_no_backend_left_raises_torchs_error():
    q, k, v = (t.to(D) for t in make((1, 2, 8, 4), (1, 2, 8, 4)))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION), pytest.raises(RuntimeError):
        # The CPU's fused kernel refuses dropout, and math is off: as on the CPU.
        F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert F.scaled_dot_product_attention(q, k, v).shape == q.shape  # usable
