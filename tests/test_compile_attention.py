"""Attention as TorchTitan compiles it: NKI-routed SDPA under torch.compile
(``TORCH_NEURONX_SIMULATE_NKI_ATTENTION=1``: the flash kernels, as on Trainium).

- Backward of transposed q/k/v views (TorchTitan's layout): the gradients have the
  layout the operator's meta kernel promises (``empty_like(query)``), which the
  compiled graph checks.
- ``TORCH_NEURONX_DISABLE_NKI_KERNELS`` decides the routing while a graph is traced,
  so it is part of the compiled-graph cache key: a warm cache built with the kernels
  on does not serve a process that turned them off.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

D = "neuron"


@pytest.fixture(autouse=True)
def _nki_attention(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_SIMULATE_NKI_ATTENTION", "1")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _attention(x, w):
    # TorchTitan's layout: (batch, seq, heads, dim) projected, then transposed to
    # (batch, heads, seq, dim) views for SDPA.
    q = (x * w).transpose(1, 2)
    k = (x + w).transpose(1, 2)
    v = x.transpose(1, 2)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_sdpa_backward_of_transposed_views(dtype):
    torch.manual_seed(0)
    x_cpu = torch.randn(2, 128, 4, 16, dtype=dtype)
    w_cpu = torch.randn(16, dtype=dtype)
    x = x_cpu.to(D).requires_grad_()
    w = w_cpu.to(D).requires_grad_()
    torch_neuronx = pytest.importorskip("torch_neuronx")
    torch_neuronx.clear_op_tracking()
    out = torch.compile(_attention, backend="neuron", fullgraph=True)(x, w)
    out.float().square().sum().backward()
    assert any("flash_attention_bwd" in op for op in torch_neuronx.get_executed_ops())

    xr, wr = x_cpu.clone().requires_grad_(), w_cpu.clone().requires_grad_()
    ref = _attention(xr, wr)
    ref.float().square().sum().backward()
    # The flash kernels accumulate in another order than the CPU's math; in
    # bfloat16 single elements may differ by a few units in the last place, so
    # the error is measured over the whole tensor.
    for got, want in ((out.detach(), ref.detach()), (x.grad, xr.grad), (w.grad, wr.grad)):
        got, want = got.cpu().float(), want.float()
        if dtype == torch.bfloat16:
            assert (got - want).norm() / want.norm() < 1e-2
        else:
            torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)


_ROUTING_PROBE = r"""
import torch, torch.nn.functional as F, torch_neuronx
def f(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
q, k, v = (torch.randn(1, 2, 128, 16, device="neuron") for _ in range(3))
torch_neuronx.clear_op_tracking()
torch.compile(f, backend="neuron", fullgraph=True)(q, k, v).cpu()
print("NKI", any(op.startswith("nki::flash") for op in torch_neuronx.get_executed_ops()))
"""


def test_disabling_the_nki_kernels_is_part_of_the_cache_key(tmp_path):
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
        "TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path / "neff"),
        "TORCH_NEURONX_SIMULATE_NKI_ATTENTION": "1",
    }

    def run(disabled: str) -> str:
        p = subprocess.run(
            [sys.executable, "-c", _ROUTING_PROBE],
            env={**env, "TORCH_NEURONX_DISABLE_NKI_KERNELS": disabled},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert p.returncode == 0, p.stderr[-3000:]
        return p.stdout

    assert "NKI True" in run("0")  # fills the cache with the kernels on
    assert "NKI False" in run("1")  # the warm cache does not bring them back
    assert "NKI True" in run("0")
    # TORCH_NEURONX_SIMULATE_NKI_ATTENTION is part of the key too.
    env.pop("TORCH_NEURONX_SIMULATE_NKI_ATTENTION")
    assert "NKI False" in run("0")
