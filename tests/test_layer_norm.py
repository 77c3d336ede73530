"""Layer norm's own device kernel: ATen's CPU layer-norm kernels run in the work
item straight into device memory (csrc/ops/layer_norm.cpp), the hottest norm of every
transformer. Results must be CPU's bit for bit, forward and backward, for every
dtype, shape and parameter combination the CPU kernel takes, and bad input must
fail at the op with CPU's message.

The weight gradient's rounding depends on the number of CPU threads; small items run
on one device thread (csrc/core/compute_pool.h), so their reference is a one-thread CPU
run, a large item's the default one.
"""

from __future__ import annotations

import contextlib
import platform

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx

D = "neuron"
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
# (input shape, normalized_shape): last dim, two dims, no rows, a 2-d input.
SHAPES = [((4, 5, 6), (6,)), ((4, 5, 6), (5, 6)), ((3, 0, 4), (4,)), ((2, 3), (3,))]


@contextlib.contextmanager
def cpu_threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _forward_backward(device, x, w, b, normalized, grads):
    leaves = [_leaf(t, device) for t in (x, w, b)]
    y = F.layer_norm(leaves[0], normalized, leaves[1], leaves[2], eps=1e-5)
    y.backward(grads.to(device))
    return [y] + [t.grad for t in leaves if t is not None]


def _leaf(t: torch.Tensor | None, device: str) -> torch.Tensor | None:
    return None if t is None else t.detach().to(device).requires_grad_()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,normalized", SHAPES, ids=str)
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_forward_and_backward_equal_cpu(dtype, shape, normalized, affine):
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype)
    w = torch.randn(normalized, dtype=dtype) if affine else None
    b = torch.randn(normalized, dtype=dtype) if affine else None
    grads = torch.randn(shape, dtype=dtype)
    with cpu_threads(1):  # a small item
        expected = _forward_backward("cpu", x, w, b, normalized, grads)
    got = _forward_backward(D, x, w, b, normalized, grads)
    for cpu, dev in zip(expected, got, strict=True):
        assert dev.device.type == D
        torch.testing.assert_close(dev.cpu(), cpu, rtol=0, atol=0)


def test_large_items_equal_a_cpu_run_with_every_thread():
    # 128 x 1024 elements: the device uses every thread, as the CPU does by default.
    torch.manual_seed(0)
    x, grads = torch.randn(128, 1024), torch.randn(128, 1024)
    w, b = torch.randn(1024), torch.randn(1024)
    expected = _forward_backward("cpu", x, w, b, (1024,), grads)
    got = _forward_backward(D, x, w, b, (1024,), grads)
    for cpu, dev in zip(expected, got, strict=True):
        torch.testing.assert_close(dev.cpu(), cpu, rtol=0, atol=0)


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_native_outputs_match_cpu_geometry(affine):
    # mean and rstd keep the leading dims and a 1 per normalized dim.
    x = torch.randn(3, 4, 5, 6)
    params = [torch.randn(5, 6), torch.randn(5, 6)] if affine else [None, None]
    cpu = torch.native_layer_norm(x, (5, 6), *params, 1e-5)
    dev = torch.native_layer_norm(
        x.to(D), (5, 6), *[p if p is None else p.to(D) for p in params], 1e-5
    )
    for c, d in zip(cpu, dev, strict=True):
        assert (d.shape, d.stride(), d.dtype) == (c.shape, c.stride(), c.dtype)
        assert torch.equal(d.cpu(), c)


def test_reduced_precision_input_with_float_parameters():
    # The CPU's mixed type: bf16 input, float weight and bias, float statistics.
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    w, b = torch.randn(8), torch.randn(8)
    cpu = torch.native_layer_norm(x, (8,), w, b, 1e-5)
    dev = torch.native_layer_norm(x.to(D), (8,), w.to(D), b.to(D), 1e-5)
    assert [t.dtype for t in dev] == [torch.bfloat16, torch.float32, torch.float32]
    for c, d in zip(cpu, dev, strict=True):
        assert torch.equal(d.cpu(), c)


def test_non_contiguous_input_and_grad():
    base = torch.randn(6, 4, dtype=torch.float64)
    x_cpu = base.t().requires_grad_()
    x_dev = base.to(D).t().requires_grad_()
    g = torch.randn(6, 4, dtype=torch.float64).t()
    F.layer_norm(x_cpu, (6,)).backward(g)
    F.layer_norm(x_dev, (6,)).backward(g.to(D))
    assert torch.equal(x_dev.grad.cpu(), x_cpu.grad)


def test_only_some_gradients_requested():
    x = torch.randn(5, 7)
    w = torch.randn(7, requires_grad=True)
    b = torch.randn(7)
    with cpu_threads(1):  # a small item
        F.layer_norm(x, (7,), w, b).sum().backward()
    w_dev = w.detach().to(D).requires_grad_()
    F.layer_norm(x.to(D), (7,), w_dev, b.to(D)).sum().backward()
    assert torch.equal(w_dev.grad.cpu(), w.grad)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="own kernel on x86_64 only")
def test_runs_as_its_own_device_op():
    x = torch.randn(2, 8, device=D, requires_grad=True)
    F.layer_norm(x, (8,)).sum().backward()
    torch.neuron.synchronize()
    executed = torch_neuronx.get_executed_ops()
    assert "aten::native_layer_norm" in executed
    assert "aten::native_layer_norm_backward" in executed
    assert not [op for op in torch_neuronx.get_fallback_ops() if "layer_norm" in op]


@pytest.mark.parametrize(
    "call,error,message",
    [
        (
            lambda: F.layer_norm(torch.randn(3, 4, device=D), (5,)),
            RuntimeError,
            "expected input with shape",
        ),
        (
            lambda: F.layer_norm(torch.randn(3, 4, device=D), (4,), torch.randn(5, device=D)),
            RuntimeError,
            "Expected weight to be of same shape",
        ),
        (
            lambda: F.layer_norm(torch.ones(3, 4, dtype=torch.long, device=D), (4,)),
            NotImplementedError,
            "not implemented for 'Long'",
        ),
        (
            lambda: F.layer_norm(torch.randn(3, 4, device=D), (4,), torch.randn(4)),
            RuntimeError,
            "Expected all tensors to be on the same device",
        ),
        (
            lambda: F.layer_norm(
                torch.randn(3, 4, dtype=torch.bfloat16, device=D),
                (4,),
                torch.randn(4, dtype=torch.float64, device=D),
            ),
            RuntimeError,
            "mixed dtype",
        ),
    ],
    ids=["shape", "weight-shape", "dtype", "cpu-weight", "mixed-dtype"],
)
def test_bad_input_fails_at_the_op_and_device_stays_usable(call, error, message):
    with pytest.raises(error, match=message):
        call()
    torch.neuron.synchronize()  # nothing pending: the error was raised at the op
    y = F.layer_norm(torch.arange(4.0, device=D), (4,))
    torch.testing.assert_close(y.cpu(), F.layer_norm(torch.arange(4.0), (4,)))
