"""``nki_op`` and ``wrap_nki`` under ``torch.compile(backend="neuron", fullgraph=True)``
in TorchNeuron's calling conventions: the op is traced through (its kernel launches
are nodes of the graph, not one opaque custom op), so an op that returns the
argument it mutates, an op with a parameter named ``mode`` and a wrapped kernel
called with ``None`` arguments compile, and compute what they compute eagerly."""

import neuronxcc.nki.typing as nt
import nki
import nki.language as nl
import pytest
import torch

from torch_neuronx import nki_op, wrap_nki
from torch_neuronx.nki import NKIError


@pytest.fixture(autouse=True)
def _compiled_graphs_must_compile(monkeypatch):
    # A graph the backend cannot compile must fail the test, not run eagerly.
    monkeypatch.delenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", raising=False)


def n(*shape):
    return torch.randn(*shape, device="neuron")


def compiled(fn):
    return torch.compile(fn, backend="neuron", fullgraph=True)


def assert_same(actual, expected):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    assert torch.equal(actual.cpu(), expected.cpu())


# (a) an op whose kernel returns its mutated argument -------------------------
@nki.jit
def accumulate(a, b: nt.mutable_tensor):
    nl.store(b, value=nl.add(nl.load(a), nl.load(b)))
    return b


@nki_op("nki_op_compile_test::accumulate", mutates_args={"b"})
def accumulate_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return wrap_nki(accumulate)(a, b)


@nki_op("nki_op_compile_test::accumulate_direct", mutates_args={"b"})
def accumulate_direct_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return accumulate(a, b)  # the kernel called directly in the body


def _accumulate_twice(op):
    def f(a, b):
        first = op(a, b)
        second = op(a, b)  # sees the b the first call wrote
        return first * 2 + second

    return f


@pytest.mark.parametrize("op", [accumulate_op, accumulate_direct_op], ids=["wrap_nki", "direct"])
def test_an_op_returning_its_mutated_argument_compiles_like_eager(op):
    a, b = n(128, 64), n(128, 64)
    A, B = a.cpu(), b.cpu()
    b_eager, b_compiled = b.clone(), b.clone()
    expected = _accumulate_twice(op)(a, b_eager)
    torch.testing.assert_close(b_eager.cpu(), B + A + A)
    torch.testing.assert_close(expected.cpu(), (B + A) * 2 + (B + A + A))

    out = compiled(_accumulate_twice(op))(a, b_compiled)
    assert_same(out, expected)
    assert_same(b_compiled, b_eager)


def test_a_returned_argument_is_a_copy_as_custom_ops_require():
    a, b = n(128, 8), n(128, 8)
    b0 = b.clone()
    out = accumulate_op(a, b)
    # b is written in place; the result holds the same values but is not b
    # (a custom op's results never alias its arguments).
    assert_same(out, b)
    assert out.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()
    torch.testing.assert_close(b.cpu(), (b0 + a).cpu())

    # Compiled, the same values (Inductor may hand back b's buffer itself: the
    # copy of a graph input it just wrote is one it can elide).
    b1 = b.clone()
    out_c = compiled(lambda a, b: accumulate_op(a, b))(a, b)
    assert_same(out_c, b)
    torch.testing.assert_close(b.cpu(), (b1 + a).cpu())


def test_the_compiled_graph_holds_the_kernel_launches_not_the_op():
    from torch._dynamo.backends.common import aot_autograd

    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm

    backend = aot_autograd(fw_compiler=capture)
    a, b = n(128, 8), n(128, 8)
    b_eager = b.clone()
    expected = accumulate_op(a, b_eager)
    out = torch.compile(lambda a, b: accumulate_op(a, b), backend=backend, fullgraph=True)(a, b)
    # The launch is functionalized (auto_functionalized_v2 of the neuron_nki op).
    targets = {
        str(t) for g in graphs for node in g.graph.nodes for t in (node.target, *node.args[:1])
    }
    assert any("neuron_nki.call_mutating" in t for t in targets), targets
    assert not any("nki_op_compile_test" in t for t in targets), targets
    assert_same(out, expected)
    assert_same(b, b_eager)


# (b) an op with a parameter named `mode` that mutates an input ----------------
@nki.jit
def scale_in_place(x: nt.mutable_tensor, mode):
    t = nl.load(x)
    nl.store(x, value=nl.multiply(t, 2.0) if mode == "double" else nl.add(t, 1.0))


@nki_op("nki_op_compile_test::scale_in_place", mutates_args={"x"})
def scale_op(x: torch.Tensor, mode: str) -> None:
    wrap_nki(scale_in_place)(x, mode)


@pytest.mark.parametrize("mode", ["double", "increment"])
def test_an_op_with_a_parameter_named_mode_mutating_an_input_compiles_like_eager(mode):
    def f(x, y):
        scale_op(x, mode)
        scale_op(x, mode=mode)
        return x + y

    x, y = n(128, 32), n(128, 32)
    x_eager, x_compiled = x.clone(), x.clone()
    expected = f(x_eager, y)
    X = x.cpu()
    torch.testing.assert_close(x_eager.cpu(), 4 * X if mode == "double" else X + 2)

    assert_same(compiled(f)(x_compiled, y), expected)
    assert_same(x_compiled, x_eager)


# (c) wrap_nki with None arguments inside a compiled function -----------------
@nki.jit
def copy_with(x, out: nt.mutable_tensor, how, bias=None, scale=None):
    t = nl.load(x)
    if how == "negate":
        t = nl.negative(t)
    if bias is not None:
        t = nl.add(t, nl.load(bias))
    if scale is not None:
        t = nl.multiply(t, scale)
    nl.store(out, value=t)
    return out


def test_wrap_nki_with_none_arguments_compiles_like_eager():
    def f(x, out, bias):
        r = wrap_nki(copy_with)(x, out, "copy", None)  # None positionally
        s = wrap_nki(copy_with)[1](x, torch.empty_like(x), "negate", bias=None, scale=None)
        t = wrap_nki(copy_with)(x, torch.empty_like(x), "copy", bias, None)
        u = wrap_nki(copy_with)(x, torch.empty_like(x), "negate", None, 3.0)
        return r + s * 2 + t * 3 + u * 4, r

    x, bias = n(128, 16), n(128, 16)
    out_e, out_c = torch.zeros_like(x), torch.zeros_like(x)
    expected, r_e = f(x, out_e, bias)
    X, BIAS = x.cpu(), bias.cpu()
    torch.testing.assert_close(expected.cpu(), X - 2 * X + 3 * (X + BIAS) - 12 * X)
    assert r_e is out_e

    got, r_c = compiled(f)(x, out_c, bias)
    assert_same(got, expected)
    assert_same(out_c, out_e)
    assert_same(r_c, out_c)


def test_none_passed_into_the_compiled_function_compiles_like_eager():
    def f(x, out, bias):
        return wrap_nki(copy_with)(x, out, "copy", bias) * 2

    x, bias = n(128, 16), n(128, 16)
    g = compiled(f)
    for b in (None, bias, None):
        out_e, out_c = torch.zeros_like(x), torch.zeros_like(x)
        expected = f(x, out_e, b)
        assert_same(g(x, out_c, b), expected)
        assert_same(out_c, out_e)


# Errors ----------------------------------------------------------------------
@nki_op("nki_op_compile_test::accumulate_bad", mutates_args={"b"})
def accumulate_bad_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return wrap_nki(accumulate)(a, b)


def test_a_kernel_error_in_a_compiled_op_names_the_kernel_problem():
    a, b = n(128, 8), n(128, 16)  # shapes the kernel cannot add
    with pytest.raises(NKIError):
        accumulate_bad_op(a, b)
    with pytest.raises(Exception, match="accumulate") as info:
        compiled(lambda a, b: accumulate_bad_op(a, b))(a, b)
    # The NKI error is the cause the user sees, whatever wraps it.
    chain, e = [], info.value
    while e is not None:
        chain.append(e)
        e = e.__cause__ or e.__context__
    assert any(isinstance(e, NKIError) for e in chain) or "NKIError" in str(info.value)
