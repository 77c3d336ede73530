"""Two processes using torch-neuronx at once do not disturb each other.

A fresh machine's README run failed in FlexAttention while another test suite used
the same installation beside it (issue 43): one process runs FlexAttention — eager,
whose block masks are built with nested ``vmap`` over neuron tensors, and compiled —
while others compile graphs under changed ``TORCH_NEURONX_*`` settings, run NKI
kernels, track ops, turn adaptive eager on and pick the overrideable SDPA backend,
all sharing one fresh Inductor cache directory (what two processes of one user
share: compiled graphs, kernel libraries, the program cache). Each process must
compute what it computes alone.
"""

from __future__ import annotations

FLEX = r"""
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

def causal(b, h, q, k):
    return q >= k

def window(b, h, q, k):
    return (q >= k) & (q - k < 40)

for step, mask_mod in enumerate([causal, window, causal]):
    g = torch.Generator().manual_seed(step)
    q, k, v = (torch.randn(2, 2, 256, 16, generator=g) for _ in range(3))
    dq, dk, dv = (t.to("neuron").requires_grad_() for t in (q, k, v))
    eager = flex_attention(dq, dk, dv)  # the empty block mask: nested vmap
    mask = create_block_mask(mask_mod, 2, 2, 256, 256, device="neuron")
    compiled = torch.compile(flex_attention, backend="neuron", fullgraph=True)
    out = compiled(dq, dk, dv, block_mask=mask)
    out.sum().backward()
    cpu_mask = create_block_mask(mask_mod, 2, 2, 256, 256, device="cpu")
    torch.testing.assert_close(out.detach().cpu(), flex_attention(q, k, v, block_mask=cpu_mask),
                               atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(eager.detach().cpu(), flex_attention(q, k, v), atol=1e-5, rtol=1e-5)
    assert torch.isfinite(dq.grad).all()
    x = torch.randn(4, 8)
    got = torch.func.vmap(lambda r: r.sin() * r.sum())(x.to("neuron"))
    torch.testing.assert_close(got.cpu(), torch.func.vmap(lambda r: r.sin() * r.sum())(x))
print("FLEX OK")
"""

OTHER = r"""
import os
import torch, torch.nn.functional as F
import torch_neuronx
from torch.nn.attention import SDPBackend, sdpa_kernel

torch_neuronx.clear_op_tracking()
torch.neuron.set_adaptive_eager(True)
model = torch.nn.Sequential(
    torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Dropout(0.2), torch.nn.Linear(64, 8)
).to("neuron")
step = torch.compile(lambda x: model(x).square().mean(), backend="neuron")
for i in range(3):
    torch.manual_seed(i)
    loss = step(torch.randn(16, 32, device="neuron"))
    loss.backward()
    assert torch.isfinite(loss).item()
torch.neuron.set_adaptive_eager(False)
for simulate in ("1", "0"):
    os.environ["TORCH_NEURONX_SIMULATE_NKI_ATTENTION"] = simulate
    q = torch.randn(1, 2, 128, 32, device="neuron", requires_grad=True)
    att = torch.compile(lambda q: F.scaled_dot_product_attention(q, q, q, is_causal=True),
                        backend="neuron")
    with sdpa_kernel(SDPBackend.OVERRIDEABLE):
        att(q).sum().backward()
    torch._dynamo.reset()
x = torch.randn(64, 64, device="neuron")
torch.testing.assert_close(F.rms_norm(x, (64,)).cpu(), F.rms_norm(x.cpu(), (64,)))
assert torch_neuronx.get_executed_ops()
print("OTHER OK")
"""


def test_flex_attention_beside_other_processes_using_the_installation(tmp_path, run_py_many, check):
    cache = str(tmp_path / "inductor-cache")  # fresh, and shared by all three
    shared = {"TORCHINDUCTOR_CACHE_DIR": cache}
    changed = {
        **shared,
        "TORCH_NEURONX_DISABLE_NKI_KERNELS": "1",
        "TORCH_NEURONX_NEFF_DISABLE_CACHE": "0",
    }
    results = run_py_many([(FLEX, shared), (OTHER, changed), (OTHER, shared)], timeout=600)
    assert "FLEX OK" in check(results[0])
    assert "OTHER OK" in check(results[1])
    assert "OTHER OK" in check(results[2])
