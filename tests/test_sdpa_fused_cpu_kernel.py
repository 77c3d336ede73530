"""scaled_dot_product_attention where the NKI flash kernels do not fit: neuron takes the
CPU's fused attention kernel (`_scaled_dot_product_flash_attention_for_cpu` and its
backward, each one device op) wherever the CPU would, instead of the ~15 ops of the math
composite (csrc/ops/sdp_choice.cpp). Results are the CPU's; the user's
`torch.nn.attention.sdpa_kernel` choice and dropout (drawn from the neuron generator by
the math path) still take math.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import torch_neuronx

FUSED = "aten::_scaled_dot_product_flash_attention_for_cpu"
FUSED_BACKWARD = "aten::_scaled_dot_product_flash_attention_for_cpu_backward"


def attention_ops() -> set[str]:
    torch.neuron.synchronize()
    return {op for op in torch_neuronx.get_executed_ops() if "attention" in op}


@pytest.fixture
def tracking():
    torch_neuronx.clear_op_tracking()
    yield
    torch_neuronx.clear_op_tracking()


def leaves(*tensors, device):
    return [t.detach().to(device).requires_grad_() for t in tensors]


CASES = {
    # (query shape, key shape, kwargs): shapes the NKI kernels do not take
    "decode step": ((1, 4, 1, 16), (1, 4, 20, 16), {}),
    "causal": ((2, 4, 8, 16), (2, 4, 8, 16), {"is_causal": True}),
    "bool mask": ((2, 4, 8, 16), (2, 4, 8, 16), {"mask": "bool"}),
    "float mask": ((2, 4, 8, 16), (2, 4, 8, 16), {"mask": "float"}),
    "grouped-query heads": ((2, 8, 8, 16), (2, 2, 8, 16), {"enable_gqa": True}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_forward_and_backward_run_the_fused_kernel_and_equal_cpu(case, tracking):
    q_shape, k_shape, kw = CASES[case]
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(s, generator=gen) for s in (q_shape, k_shape, k_shape))
    mask = kw.pop("mask", None)
    if mask == "bool":
        kw["attn_mask"] = torch.rand(q_shape[2], k_shape[2], generator=gen) > 0.3
    elif mask == "float":
        kw["attn_mask"] = torch.randn(q_shape[2], k_shape[2], generator=gen)
    grad = torch.randn(q_shape, generator=gen)
    results = {}
    for device in ("cpu", "neuron"):
        args = leaves(q, k, v, device=device)
        dkw = {n: t.to(device) if isinstance(t, torch.Tensor) else t for n, t in kw.items()}
        out = F.scaled_dot_product_attention(*args, **dkw)
        out.backward(grad.to(device))
        results[device] = [out.detach()] + [t.grad for t in args]
    assert {FUSED, FUSED_BACKWARD} <= attention_ops()
    for name, got, want in zip(
        ("out", "dq", "dk", "dv"), results["neuron"], results["cpu"], strict=True
    ):
        torch.testing.assert_close(got.cpu(), want, msg=f"{case}: {name}")


def test_the_users_backend_choice_is_kept(tracking):
    q = torch.randn(1, 2, 8, 16, device="neuron")
    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(q, q, q)
    assert FUSED not in attention_ops()
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(*(q.cpu(),) * 3))


def test_dropout_takes_the_math_path_on_the_neuron_generator(tracking):
    q = torch.randn(1, 2, 8, 16, device="neuron")
    torch.neuron.manual_seed(3)
    a = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    assert FUSED not in attention_ops()
    torch.neuron.manual_seed(3)
    b = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    assert torch.equal(a.cpu(), b.cpu())  # the same seed, the same mask


def test_under_compile(tracking):
    q = torch.randn(1, 4, 1, 16, device="neuron")
    k = torch.randn(1, 4, 20, 16, device="neuron")

    @torch.compile(backend="neuron", fullgraph=True)
    def attend(q, k):
        return F.scaled_dot_product_attention(q, k, k)

    torch.testing.assert_close(
        attend(q, k).cpu(), F.scaled_dot_product_attention(q.cpu(), k.cpu(), k.cpu())
    )
