"""FlexAttention on neuron: score and block masks, forward and backward, eager and
compiled.

Eager: torch's ``flex_attention`` admits only its own device list; torch_neuronx
admits neuron tensors to its unfused path (flex_attention_support.py). Compiled
(``backend="neuron"``): each FlexAttention call of a graph becomes its dense form,
compiled by Inductor (compile/flex_attention.py). Forwards equal the CPU's (eager,
and Inductor's compiled CPU kernel); backwards (which the CPU refuses:
"FlexAttention does not support backward on CPU") equal plain PyTorch attention's
autograd with the same bias and mask.
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


def test_autocast_region_casts_like_cuda_and_trains():
    # TorchTitan's single-device mixed precision runs FlexAttention inside
    # torch.autocast: query, key and value are cast to the region's dtype (CUDA's and
    # the CPU's rule); the forward equals the CPU's, and gradients reach the inputs.
    def run(device, requires_grad):
        q, k, v = inputs(device, requires_grad)
        block_mask = create_block_mask(causal, B, H, S, S, device=device)
        with torch.autocast(device, dtype=torch.bfloat16):
            out = flex_attention(q, k, v, score_mod=relative_bias, block_mask=block_mask)
            if requires_grad:  # in the region, as TorchTitan's step runs it
                out.float().square().sum().backward()
        return out, (q, k, v)

    out, (q, k, v) = run(D, requires_grad=True)
    assert out.dtype == torch.bfloat16
    cpu, _ = run("cpu", requires_grad=False)  # the CPU has no FlexAttention backward here
    torch.testing.assert_close(out.detach().cpu(), cpu)
    assert all(t.grad is not None and t.grad.dtype == torch.float32 for t in (q, k, v))
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_other_devices_keep_torchs_checks():
    # The shim admits neuron only: the CPU still refuses a backward, as upstream.
    q, k, v = inputs("cpu", requires_grad=True)
    with pytest.raises(NotImplementedError, match="does not support backward on CPU"):
        flex_attention(q, k, v)


# ---------------------------------------------------------------------------
# Compiled (torch.compile(backend="neuron")): compile/flex_attention.py replaces the
# FlexAttention operator of each compiled graph by its dense form, which Inductor's
# C++ kernels compute. Shapes with more than one 128-wide block, so that block masks
# have full, partial and empty blocks.

CS = 256  # sequence length of the compiled tests
WINDOW = 48
DOC_ENDS = (70, 150, CS)  # three documents


def sliding_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < WINDOW)


def document_ids(device):
    ids = torch.zeros(CS, dtype=torch.int32)
    start = 0
    for i, end in enumerate(DOC_ENDS):
        ids[start:end] = i
        start = end
    return ids.to(device)


def document_causal(ids):
    # The mask captures a tensor: the operator's mask_mod buffers.
    def mask(b, h, q_idx, kv_idx):
        return (ids[q_idx] == ids[kv_idx]) & (q_idx >= kv_idx)

    return mask


def mask_for(name, device):
    if name == "document":
        return document_causal(document_ids(device))
    return {"causal": causal, "sliding_window": sliding_window}[name]


def dense_reference(q, k, v, mask_mod, bias=None):
    """Plain attention on the CPU with the mask evaluated at every position and
    ``bias`` (the relative-position bias's slope, per head) or none."""
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
    idx = torch.arange(q.size(-2))
    rel = (idx[:, None] - idx[None, :]).float()
    if bias is not None:
        scores = scores + bias.view(1, -1, 1, 1) * rel
    keep = mask_mod(None, None, idx[:, None], idx[None, :])
    return scores.masked_fill(~keep, float("-inf")).softmax(-1) @ v


def compiled_inputs(device, requires_grad, seq=CS):
    g = torch.Generator().manual_seed(1)
    return [
        torch.randn(B, H, seq, E, generator=g).to(device).requires_grad_(requires_grad)
        for _ in range(3)
    ]


def assert_compiled_without_fallback(counters, graphs=1):
    assert counters["neuron"]["compiled_graphs"] == graphs
    assert counters["neuron"]["eager_fallbacks"] == 0
    assert counters["neuron"]["execution_fallbacks"] == 0


@pytest.fixture
def dynamo_counters():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    yield counters
    torch._dynamo.reset()


@pytest.mark.parametrize("mask_name", ["causal", "sliding_window", "document"])
def test_compiled_forward_and_backward_equal_the_cpus(mask_name, dynamo_counters):
    q, k, v = compiled_inputs(D, requires_grad=True)
    block_mask = create_block_mask(mask_for(mask_name, D), B, H, CS, CS, device=D)
    attend = torch.compile(flex_attention, backend="neuron", fullgraph=True, dynamic=False)
    out = attend(q, k, v, score_mod=relative_bias, block_mask=block_mask)
    out.square().sum().backward()
    # One graph (no graph break), compiled (no eager fallback).
    assert_compiled_without_fallback(dynamo_counters)
    assert out.device.type == "neuron"

    # The CPU's eager FlexAttention (forward only on the CPU) ...
    qc, kc, vc = compiled_inputs("cpu", requires_grad=False)
    cpu_mask = create_block_mask(mask_for(mask_name, "cpu"), B, H, CS, CS, device="cpu")
    cpu_out = flex_attention(qc, kc, vc, score_mod=relative_bias, block_mask=cpu_mask)
    torch.testing.assert_close(out.detach().cpu(), cpu_out, atol=1e-5, rtol=1e-5)
    # ... and plain attention's autograd on the CPU for the gradients.
    qr, kr, vr = compiled_inputs("cpu", requires_grad=True)
    ref = dense_reference(qr, kr, vr, mask_for(mask_name, "cpu"), torch.full((H,), 0.05))
    ref.square().sum().backward()
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), atol=1e-5, rtol=1e-5)
    for got, want in ((q.grad, qr.grad), (k.grad, kr.grad), (v.grad, vr.grad)):
        torch.testing.assert_close(got.cpu(), want, atol=1e-4, rtol=1e-5)


def test_compiled_forward_equals_the_cpus_compiled_kernel(dynamo_counters):
    # Inference: the CPU compiles FlexAttention to its C++ flash template (forward
    # only); neuron computes the dense form. Same results to float32 rounding.
    from torch._inductor.kernel.flex.flex_cpu import check_cpu_supported

    if not check_cpu_supported():
        pytest.skip("Inductor's CPU FlexAttention template needs AVX2")

    def run(device, backend):
        q, k, v = compiled_inputs(device, requires_grad=False)
        block_mask = create_block_mask(sliding_window, B, H, CS, CS, device=device)
        attend = torch.compile(flex_attention, backend=backend, fullgraph=True)
        return attend(q, k, v, score_mod=relative_bias, block_mask=block_mask)

    cpu = run("cpu", "inductor")
    with torch._inductor.config.patch(force_disable_caches=True):  # the pass runs
        out = run(D, "neuron")
    assert dynamo_counters["neuron"]["flex_attention_dense"] == 1  # the forward graph
    assert_compiled_without_fallback(dynamo_counters)
    torch.testing.assert_close(out.cpu(), cpu, atol=1e-5, rtol=1e-5)


class FlexBlock(torch.nn.Module):
    """Projections around FlexAttention, with a learned relative-position slope per
    head in the score_mod (a captured parameter: the operator computes its gradient)."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(H * E, 3 * H * E)
        self.proj = torch.nn.Linear(H * E, H * E)
        self.slope = torch.nn.Parameter(torch.linspace(-0.1, 0.1, H))

    def attention(self, q, k, v, block_mask):
        slope = self.slope

        def learned_bias(score, b, h, q_idx, kv_idx):
            return score + slope[h] * (q_idx - kv_idx)

        return flex_attention(q, k, v, score_mod=learned_bias, block_mask=block_mask)

    def forward(self, x, block_mask, attend=None):
        n, s, _ = x.shape
        q, k, v = self.qkv(x).view(n, s, 3, H, E).permute(2, 0, 3, 1, 4)
        if attend is None:
            o = self.attention(q, k, v, block_mask)
        else:
            o = attend(q, k, v)
        return self.proj(o.transpose(1, 2).reshape(n, s, H * E))


def test_module_with_projections_compiles_end_to_end(dynamo_counters):
    torch.manual_seed(0)
    cpu_block = FlexBlock()
    x = torch.randn(B, CS, H * E)
    block = FlexBlock().to(D)
    block.load_state_dict(cpu_block.state_dict())
    block_mask = create_block_mask(mask_for("document", D), None, None, CS, CS, device=D)
    compiled = torch.compile(block, backend="neuron", fullgraph=True)
    out = compiled(x.to(D), block_mask)
    out.square().sum().backward()
    assert_compiled_without_fallback(dynamo_counters)
    assert block.slope.grad is not None  # the captured parameter's gradient

    mask = mask_for("document", "cpu")
    ref = cpu_block(x, None, attend=lambda q, k, v: dense_reference(q, k, v, mask, cpu_block.slope))
    ref.square().sum().backward()
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), atol=1e-5, rtol=1e-5)
    for (name, got), want in zip(block.named_parameters(), cpu_block.parameters(), strict=True):
        torch.testing.assert_close(got.grad.cpu(), want.grad, atol=1e-4, rtol=1e-5, msg=name)


def test_compiled_dynamic_shapes_forward_and_backward(dynamo_counters):
    # dynamic=True: the dense form is traced with symbolic sizes (the block mask's
    # lengths and block counts are SymInt inputs of the graph). Each length is a
    # graph of its own, as on CUDA: Dynamo guards on the block mask's Python ints.
    attend = torch.compile(flex_attention, backend="neuron", fullgraph=True, dynamic=True)
    for seq in (256, 384):
        q, k, v = compiled_inputs(D, requires_grad=True, seq=seq)
        block_mask = create_block_mask(causal, B, H, seq, seq, device=D)
        out = attend(q, k, v, score_mod=relative_bias, block_mask=block_mask)
        out.sum().backward()
        qr, kr, vr = (t.detach().cpu().requires_grad_() for t in (q, k, v))
        ref = dense_reference(qr, kr, vr, causal, torch.full((H,), 0.05))
        ref.sum().backward()
        torch.testing.assert_close(out.detach().cpu(), ref.detach(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(q.grad.cpu(), qr.grad, atol=1e-4, rtol=1e-5)
    assert_compiled_without_fallback(dynamo_counters, graphs=2)


def test_compiled_cpu_tensors_run_on_neuron(dynamo_counters):
    # backend="neuron" runs a CPU graph on the device (CPU autocopy), FlexAttention
    # included; inference (the CPU itself has no FlexAttention backward).
    q, k, v = compiled_inputs("cpu", requires_grad=False)
    block_mask = create_block_mask(causal, B, H, CS, CS, device="cpu")
    attend = torch.compile(flex_attention, backend="neuron", fullgraph=True)
    out = attend(q, k, v, score_mod=relative_bias, block_mask=block_mask)
    assert out.device.type == "neuron"
    assert_compiled_without_fallback(dynamo_counters)
    want = flex_attention(q, k, v, score_mod=relative_bias, block_mask=block_mask)
    torch.testing.assert_close(out.cpu(), want, atol=1e-5, rtol=1e-5)


def test_compiled_bad_inputs_raise_clear_errors(dynamo_counters):
    q, k, v = compiled_inputs(D, requires_grad=True, seq=128)
    attend = torch.compile(flex_attention, backend="neuron", fullgraph=True)
    # torch's own checks, traced by Dynamo (the message is in Dynamo's error).
    cpu_mask = create_block_mask(causal, B, H, 128, 128, device="cpu")
    with pytest.raises(Exception, match="block_mask to be on the same device"):
        attend(q, k, v, block_mask=cpu_mask)
    longer = create_block_mask(causal, B, H, 256, 256, device=D)
    with pytest.raises(Exception, match="block_mask was created for"):
        attend(q, k, v, block_mask=longer)
    # A CUDA-only kernel choice: refused when the graph is compiled.
    mask = create_block_mask(causal, B, H, 128, 128, device=D)
    with pytest.raises(Exception, match="BACKEND='FLASH' selects CUDA's FlashAttention"):
        attend(q, k, v, block_mask=mask, kernel_options={"BACKEND": "FLASH"})
    # The device stays usable.
    out = attend(q, k, v, block_mask=mask)
    assert out.shape == q.shape
