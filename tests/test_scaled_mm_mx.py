"""torch._scaled_mm with microscaling (MX) block scales on neuron — the
matmul TorchAO's MXFP8 / MXFP4 path calls (KernelPreference.AUTO), which
CUDA runs on Blackwell and the CPU kernel refuses. Checked against the
operands decoded with their block scales and multiplied in fp32, and against
TorchAO's CPU emulation."""

from __future__ import annotations

import copy

import pytest
import torch

import torch_neuronx

mx = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
from torchao.prototype.mx_formats.utils import to_blocked  # noqa: E402

FP4 = torch.float4_e2m1fn_x2


def _mx(x: torch.Tensor, elem) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(packed elements as _scaled_mm takes them, swizzled scales, the decoded
    fp32 values) of x quantized with 32-element blocks."""
    t = mx.MXTensor.to_mx(x, elem, 32)
    q = t.qdata.view(FP4) if elem == FP4 else t.qdata  # torchao keeps fp4 as uint8
    return q, to_blocked(t.scale.view(x.shape[0], -1)), t.dequantize(torch.float32)


@pytest.mark.parametrize("elem", [torch.float8_e4m3fn, torch.float8_e5m2, FP4])
@pytest.mark.parametrize("m, k, n", [(48, 256, 72), (130, 96, 8)])
def test_mx_scaled_mm_equals_decoded_product(elem, m, k, n):
    """Every block's scale applies to its own 32 elements: rows past 128 and a
    K of three blocks (padded to four in the swizzled layout) included."""
    torch.manual_seed(0)
    # Rows of very different magnitudes: the block scales span many binades.
    a = torch.randn(m, k) * torch.logspace(-8, 8, m, base=2).unsqueeze(1)
    b = torch.randn(n, k) * torch.logspace(6, -6, n, base=2).unsqueeze(1)
    qa, sa, da = _mx(a.bfloat16(), elem)
    qb, sb, db = _mx(b.bfloat16(), elem)
    want = da @ db.t()
    bias = torch.randn(n)
    dev = "neuron"
    got = torch._scaled_mm(
        qa.to(dev), qb.to(dev).t(), sa.to(dev), sb.to(dev), out_dtype=torch.float32
    )
    torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=1e-6)
    got = torch._scaled_mm(
        qa.to(dev),
        qb.to(dev).t(),
        sa.to(dev),
        sb.to(dev),
        bias=bias.bfloat16().to(dev),
        out_dtype=torch.bfloat16,
    )
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(
        got.cpu().float(), (want + bias.bfloat16().float()).bfloat16().float()
    )
    assert "aten::_scaled_mm" in torch_neuronx.get_executed_ops()


def test_torchao_mx_linear_equals_cpu_emulation():
    """TorchAO's MXFP8 linear on neuron (its own _scaled_mm path) gives the
    bits of its emulated path on the CPU."""
    from torchao.prototype.mx_formats import MXDynamicActivationMXWeightConfig
    from torchao.quantization import quantize_
    from torchao.quantization.quantize_.common import KernelPreference

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 64, bias=False)
    ).bfloat16()
    x = torch.randn(40, 128).bfloat16()
    cpu = copy.deepcopy(model)
    quantize_(cpu, MXDynamicActivationMXWeightConfig(kernel_preference=KernelPreference.EMULATED))
    dev = copy.deepcopy(model).to("neuron")
    quantize_(dev, MXDynamicActivationMXWeightConfig(kernel_preference=KernelPreference.AUTO))
    with torch.no_grad():
        want = cpu(x)
        got = dev(x.to("neuron")).cpu()
    assert torch.equal(got, want)


def _operands(elem=torch.float8_e4m3fn, m=16, k=64, n=8):
    qa, sa, _ = _mx(torch.randn(m, k).bfloat16(), elem)
    qb, sb, _ = _mx(torch.randn(n, k).bfloat16(), elem)
    return [t.to("neuron") for t in (qa, sa, sb, qb)]


def test_mx_scaled_mm_bad_input_is_a_clear_error():
    qa, sa, sb, qb = _operands()
    with pytest.raises(RuntimeError, match="swizzled"):
        torch._scaled_mm(qa, qb.t(), sa[:-4], sb, out_dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="scale_b must be too"):
        torch._scaled_mm(qa, qb.t(), sa, sb.float(), out_dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="bfloat16, float16 or float32"):
        torch._scaled_mm(qa, qb.t(), sa, sb, out_dtype=torch.float8_e4m3fn)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch._scaled_mm(qa, qa.t()[:32], sa, sb, out_dtype=torch.bfloat16)
    fa, fsa, _, _ = _operands(FP4)
    with pytest.raises(RuntimeError, match="must both be fp8 or both fp4"):
        torch._scaled_mm(fa, qb.t(), fsa, sb, out_dtype=torch.bfloat16)
    # The device is still usable, and a good call still right.
    got = torch._scaled_mm(qa, qb.t(), sa, sb, out_dtype=torch.float32)
    assert got.shape == (16, 8) and torch.isfinite(got.cpu()).all()


def test_tensorwise_scaled_mm_unchanged():
    """Tensor-wise scales keep the CPU kernel's result."""
    a = torch.randn(16, 32).to(torch.float8_e4m3fn)
    b = torch.randn(24, 32).to(torch.float8_e4m3fn).t()
    sa, sb = torch.tensor(0.5), torch.tensor(2.0)
    want = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    got = torch._scaled_mm(
        a.to("neuron"), b.to("neuron"), sa.to("neuron"), sb.to("neuron"), out_dtype=torch.bfloat16
    )
    assert torch.equal(got.cpu(), want)
