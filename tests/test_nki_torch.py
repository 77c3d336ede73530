"""NKI kernels on neuron tensors: direct calls, wrap_nki, nki_op, autograd,
fake tensors and torch.compile; and NKI's import names."""

import os
import subprocess
import sys
import textwrap

import neuronxcc.nki.typing as nt
import nki
import nki.language as nl
import pytest
import torch
from device_trace import trace_labels

from torch_neuronx import nki_op, wrap_nki
from torch_neuronx.nki import NKIError


@nki.jit
def add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.add(nl.load(a), nl.load(b)))
    return out


@nki.jit
def axpy_(y: nt.mutable_tensor, x, alpha):
    nl.store(y, value=nl.add(nl.load(y), nl.multiply(nl.load(x), alpha)))


@nki.jit
def maybe_bias(x, bias=None, scale=1.0):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.multiply(nl.load(x), scale)
    if bias is not None:
        t = nl.add(t, nl.load(bias))
    nl.store(out, value=t)
    return out


@nki.jit
def two_results(x):
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(a, value=nl.exp(t))
    nl.store(b, value=nl.negative(t))
    return a, b


def n(*shape):
    return torch.randn(*shape, device="neuron")


def test_a_launch_is_one_work_item_on_the_current_stream():
    a, b = n(128, 64), n(128, 64)
    add_kernel(a, b)  # traced here, outside the trace window
    labels = trace_labels(lambda: add_kernel(a, b))
    assert labels.count("nki::add_kernel") == 1
    s = torch.neuron.Stream()
    with torch.neuron.stream(s):
        labels = trace_labels(lambda: add_kernel(a, b))
    assert "nki::add_kernel" in labels


def test_views_with_offsets_and_strides():
    base = n(300, 64)
    a = base[100:228]
    b = n(64, 128).t()  # a transposed (non-contiguous) view
    out = add_kernel(a, b)
    torch.testing.assert_close(out.cpu(), a.cpu() + b.cpu())


def test_mixed_devices_are_rejected():
    with pytest.raises(NKIError, match="one device"):
        add_kernel(n(128, 8), torch.randn(128, 8))


def test_wrap_nki_eager_grid_mutable_none_and_constants():
    a, b = n(128, 32), n(128, 32)
    torch.testing.assert_close(wrap_nki(add_kernel)(a, b).cpu(), (a + b).cpu())
    y = a.clone()
    assert wrap_nki(axpy_)(y, b, 3.0) == ()  # no results
    torch.testing.assert_close(y.cpu(), (a + 3 * b).cpu())
    w = wrap_nki(maybe_bias)
    torch.testing.assert_close(w(a).cpu(), a.cpu())
    torch.testing.assert_close(w(a, b, scale=2.0).cpu(), (2 * a + b).cpu())
    e, m = wrap_nki(two_results)(a)
    torch.testing.assert_close(e.cpu(), a.cpu().exp())
    torch.testing.assert_close(m.cpu(), -a.cpu())


@nki.jit
def row_block_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    rows = slice(i * 128, (i + 1) * 128)
    nl.store(out[rows], value=nl.add(nl.load(a[rows]), nl.load(b[rows])))
    return out


def test_wrap_nki_with_a_grid():
    a, b = n(512, 16), n(512, 16)
    torch.testing.assert_close(wrap_nki(row_block_add)[4](a, b).cpu(), (a + b).cpu())


wrapped_add = wrap_nki(add_kernel)
wrapped_axpy = wrap_nki(axpy_)


def test_wrap_nki_under_compile_fullgraph():
    @torch.compile(backend="neuron", fullgraph=True)
    def f(a, b):
        c = wrapped_add(a * 2, b)
        return c.relu() + 1

    a, b = n(128, 64), n(128, 64)
    torch.testing.assert_close(f(a, b).cpu(), ((2 * a + b).relu() + 1).cpu())


def test_mutating_kernel_under_compile_fullgraph():
    @torch.compile(backend="neuron", fullgraph=True)
    def f(y, x):
        wrapped_axpy(y, x, 0.5)
        return y * 2

    y, x = n(128, 16), n(128, 16)
    y0 = y.clone()
    out = f(y, x)
    torch.testing.assert_close(y.cpu(), (y0 + 0.5 * x).cpu())
    torch.testing.assert_close(out.cpu(), 2 * (y0 + 0.5 * x).cpu())


@nki_op("nki_test::scaled_add", mutates_args=())
def scaled_add(a: torch.Tensor, b: torch.Tensor, alpha: float) -> torch.Tensor:
    return maybe_bias(a, b, scale=alpha)


def _scaled_add_setup(ctx, inputs, output):
    ctx.alpha = inputs[2]


def _scaled_add_backward(ctx, grad):
    return grad * ctx.alpha, grad, None


scaled_add.register_autograd(_scaled_add_backward, setup_context=_scaled_add_setup)


def test_nki_op_is_a_custom_op_with_autograd():
    a = n(128, 8).requires_grad_()
    b = n(128, 8).requires_grad_()
    y = torch.ops.nki_test.scaled_add(a, b, 3.0)
    torch.testing.assert_close(y.detach().cpu(), (3 * a + b).detach().cpu())
    y.sum().backward()
    torch.testing.assert_close(a.grad.cpu(), torch.full((128, 8), 3.0))
    torch.testing.assert_close(b.grad.cpu(), torch.ones(128, 8))


def test_nki_op_fake_tensors_and_compile():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fa = mode.from_tensor(torch.empty(128, 8, device="neuron"))
        fy = scaled_add(fa, fa, 2.0)
        assert fy.shape == (128, 8) and fy.device.type == "neuron"

    g = torch.compile(lambda a, b: scaled_add(a, b, 2.0).sum(1), backend="neuron", fullgraph=True)
    a, b = n(128, 8), n(128, 8)
    torch.testing.assert_close(g(a, b).cpu(), (2 * a + b).sum(1).cpu())


def test_nki_op_under_autocast():
    a, b = n(128, 8), n(128, 8)
    with torch.autocast("neuron", dtype=torch.bfloat16):
        y = scaled_add(a, b, 1.0)
    torch.testing.assert_close(y.cpu(), (a + b).cpu())


def test_import_names_do_not_shadow_a_real_installation(tmp_path):
    fake = tmp_path / "nki"
    fake.mkdir()
    (fake / "__init__.py").write_text("REAL_NKI = True\n")
    code = textwrap.dedent(
        """
        import nki, neuronxcc.nki.isa as lisa
        print(getattr(nki, "REAL_NKI", False), lisa.__name__)
        """
    )
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "neuronxcc.nki.isa"]


def test_import_names_work_before_torch():
    code = "import sys; import nki.language as nl; import nki; print(nl.tile_size.pmax, nki.jit)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("128 ")
