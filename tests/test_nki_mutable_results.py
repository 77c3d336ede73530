"""Kernels in the vendor's common style: outputs declared ``nt.mutable_tensor``
(or, as NKI-lib writes them, plain output arguments), stored into and returned
(``return y``; ``return c_output, a_input``), called through ``wrap_nki``
(eager, with grids, inside ``torch.compile``), through ``@nki_op`` functions
that compute their grid from shapes, directly, and on NumPy through
``simulate_kernel`` / ``baremetal``."""

import neuronxcc.nki.typing as nt
import nki
import nki.language as nl
import numpy as np
import pytest
import torch
from neuronxcc.nki import baremetal, simulate_kernel

from torch_neuronx import nki_op, wrap_nki


@pytest.fixture(autouse=True)
def _compiled_graphs_must_compile(monkeypatch):
    # A graph the neuron backend cannot compile must fail the test, not run eagerly:
    # the default, kept whatever the caller's environment says.
    monkeypatch.delenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", raising=False)


@nki.jit
def scale_into(x, y: nt.mutable_tensor, scale):
    ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iy = nl.arange(x.shape[1])[None, :]
    nl.store(y[ix, iy], value=nl.multiply(nl.load(x[ix, iy]), scale))
    return y


@nki.jit
def add_and_bump(a_input: nt.mutable_tensor, b_input):
    """c = a + b (a new tensor); a += 1 in place; returns both."""
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    a = nl.load(a_input)
    nl.store(c_output, value=nl.add(a, nl.load(b_input)))
    nl.store(a_input, value=nl.add(a, 1.0))
    return c_output, a_input


@pytest.mark.parametrize("device", ["neuron", "cpu"])
def test_wrap_nki_returns_the_mutated_argument_itself(device):
    x = torch.randn(256, 32, device=device)
    y = torch.zeros(256, 32, device=device)
    out = wrap_nki(scale_into)[2](x, y, 3.0)
    assert out is y
    torch.testing.assert_close(y.cpu(), 3 * x.cpu())
    y2 = torch.zeros(128, 32, device=device)
    assert wrap_nki(scale_into)(x[:128], y2, 2.0) is y2
    torch.testing.assert_close(y2.cpu(), 2 * x[:128].cpu())


@pytest.mark.parametrize("device", ["neuron", "cpu"])
def test_a_new_tensor_and_a_mutated_argument_come_back_in_the_kernels_order(device):
    a = torch.randn(128, 64, device=device)
    b = torch.randn(128, 64, device=device)
    a0 = a.clone()
    for call in (wrap_nki(add_and_bump), add_and_bump):  # wrap_nki, then a direct call
        a.copy_(a0)
        c, a_out = call(a, b)
        assert a_out is a and c is not a and c is not b
        torch.testing.assert_close(c.cpu(), (a0 + b).cpu())
        torch.testing.assert_close(a.cpu(), (a0 + 1).cpu())


def test_numpy_callers_get_their_arrays_back():
    x = np.random.default_rng(3).standard_normal((256, 16)).astype(np.float32)
    y = np.zeros_like(x)
    assert simulate_kernel(scale_into[2], x, y, 2.0) is y
    np.testing.assert_allclose(y, 2 * x, rtol=1e-6)

    a, b = x[:128].copy(), x[128:].copy()
    a0 = a.copy()
    c, a_out = simulate_kernel(add_and_bump, a, b)
    assert a_out is a
    np.testing.assert_allclose(c, a0 + b, rtol=1e-6)
    np.testing.assert_allclose(a, a0 + 1, rtol=1e-6)

    y2 = np.zeros_like(x)
    assert baremetal(scale_into)[2](x, y2, 4.0) is y2
    np.testing.assert_allclose(y2, 4 * x, rtol=1e-6)


# nki_op functions in the vendor's style -----------------------------------
@nki.jit
def tile_combine(a_input: nt.mutable_tensor, b_input, scale, bias=None, op="add"):
    """Per [128, 512] tile: c = (a op b) [+ bias] (new); a *= scale in place."""
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iy = nl.program_id(1) * 512 + nl.arange(512)[None, :]
    a = nl.load(a_input[ix, iy])
    b = nl.load(b_input[ix, iy])
    c = nl.add(a, b) if op == "add" else nl.subtract(a, b)
    if bias is not None:
        c = nl.add(c, nl.load(bias[ix, iy]))
    nl.store(c_output[ix, iy], value=c)
    nl.store(a_input[ix, iy], value=nl.multiply(a, scale))
    return c_output, a_input


@nki_op("nki_mutable_test::combine", mutates_args={"a"})
def combine(
    a: torch.Tensor,
    b: torch.Tensor,
    scale: float,
    bias: torch.Tensor | None = None,
    op: str = "add",
) -> torch.Tensor:
    grid = [a.shape[0] // 128, b.shape[1] // 512]
    c, _ = wrap_nki(tile_combine)[grid](a, b, scale, bias, op)
    return c


@nki.jit
def add_rows_(x: nt.mutable_tensor, value):
    ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iy = nl.arange(x.shape[1])[None, :]
    nl.store(x[ix, iy], value=nl.add(nl.load(x[ix, iy]), value))
    return x


@nki_op("nki_mutable_test::add_rows_", mutates_args={"x"})
def add_rows_op(x: torch.Tensor, value: float) -> None:
    wrap_nki(add_rows_)[x.shape[0] // 128](x, value)


@nki.jit
def row_product(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iy = nl.arange(a.shape[1])[None, :]
    nl.store(out[ix, iy], value=nl.multiply(nl.load(a[ix, iy]), nl.load(b[ix, iy])))
    return out


@nki_op("nki_mutable_test::product", mutates_args=())
def product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return wrap_nki(row_product)[[a.shape[0] // 128]](a, b)


def _product_backward(ctx, grad):
    a, b = ctx.saved_tensors
    return product(grad, b), product(grad, a)


def _product_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


product.register_autograd(_product_backward, setup_context=_product_setup)


def n(*shape):
    return torch.randn(*shape, device="neuron")


def _model(a, b, bias):
    c = combine(a, b, 2.0, bias, "sub")
    d = combine(a, b, 0.5)  # sees the a that the first call scaled
    return c * 2 + d


def test_nki_op_with_grid_from_shapes_none_and_string_flags_compiles_like_eager():
    a, b, bias = n(256, 1024), n(256, 1024), n(256, 1024)
    a_eager, a_compiled = a.clone(), a.clone()
    expected = _model(a_eager, b, bias)
    A, B, BIAS = a.cpu(), b.cpu(), bias.cpu()
    torch.testing.assert_close(expected.cpu(), (A - B + BIAS) * 2 + (2 * A + B))
    torch.testing.assert_close(a_eager.cpu(), A)  # 2.0 then 0.5

    compiled = torch.compile(_model, backend="neuron", fullgraph=True)
    torch.testing.assert_close(compiled(a_compiled, b, bias).cpu(), expected.cpu())
    torch.testing.assert_close(a_compiled.cpu(), a_eager.cpu())


def test_nki_op_without_results_and_wrap_nki_inside_a_compiled_function():
    def step(x, y):
        add_rows_op(x, 3.0)
        z = product(x, y)
        # Called directly in the compiled function, grid from shapes, the
        # mutated argument returned.
        w = wrap_nki(add_rows_)[[y.shape[0] // 128]](y, 1.0)
        return z + w, w

    x, y = n(256, 64), n(256, 64)
    X, Y = x.cpu(), y.cpu()
    xe, ye, xc, yc = x.clone(), y.clone(), x.clone(), y.clone()
    out_e, w_e = step(xe, ye)
    assert w_e is ye
    torch.testing.assert_close(out_e.cpu(), (X + 3) * Y + Y + 1)
    torch.testing.assert_close(xe.cpu(), X + 3)

    out_c, w_c = torch.compile(step, backend="neuron", fullgraph=True)(xc, yc)
    torch.testing.assert_close(out_c.cpu(), out_e.cpu())
    torch.testing.assert_close(xc.cpu(), xe.cpu())
    torch.testing.assert_close(yc.cpu(), ye.cpu())
    torch.testing.assert_close(w_c.cpu(), yc.cpu())


def test_nki_op_autograd_eager_and_compiled():
    a = n(256, 32).requires_grad_()
    b = n(256, 32).requires_grad_()
    product(a, b).sum().backward()
    torch.testing.assert_close(a.grad.cpu(), b.detach().cpu())
    torch.testing.assert_close(b.grad.cpu(), a.detach().cpu())

    a2 = a.detach().clone().requires_grad_()
    b2 = b.detach().clone().requires_grad_()
    f = torch.compile(lambda p, q: (product(p, q) * 2).sum(), backend="neuron", fullgraph=True)
    f(a2, b2).backward()
    torch.testing.assert_close(a2.grad.cpu(), 2 * b.detach().cpu())
    torch.testing.assert_close(b2.grad.cpu(), 2 * a.detach().cpu())


def test_nki_op_under_autocast_keeps_working():
    a, b = n(256, 32), n(256, 32)
    with torch.autocast("neuron", dtype=torch.bfloat16):
        y = product(a, b)
    torch.testing.assert_close(y.cpu(), (a * b).cpu())


@nki.jit
def copy_into(x, y):
    """NKI 0.7/0.8 style (NKI-lib's): the output is an argument, not annotated."""
    nl.store(y, value=nl.multiply(nl.load(x), 3.0))


def test_a_kernel_writes_an_unannotated_output_argument_in_place():
    x, y = n(128, 8), torch.zeros(128, 8, device="neuron")
    version = y._version
    assert copy_into(x, y) is None
    torch.testing.assert_close(y.cpu(), 3 * x.cpu())
    # Written in place, as by an in-place op: autograd's checks see it.
    assert y._version > version
    # The read-only argument is untouched and unbumped.
    assert x._version == 0


def test_wrap_nki_learns_the_written_arguments_from_the_trace_eager_and_compiled():
    x = n(128, 8)
    y = torch.zeros(128, 8, device="neuron")
    wrap_nki(copy_into)(x, y)
    torch.testing.assert_close(y.cpu(), 3 * x.cpu())

    def f(x, y):
        wrap_nki(copy_into)(x, y)
        return y + 1.0

    y2 = torch.zeros(128, 8, device="neuron")
    out = torch.compile(f, backend="neuron", fullgraph=True)(x, y2)
    # The mutation reaches the caller's tensor and what reads it afterwards.
    torch.testing.assert_close(y2.cpu(), 3 * x.cpu())
    torch.testing.assert_close(out.cpu(), 3 * x.cpu() + 1.0)
