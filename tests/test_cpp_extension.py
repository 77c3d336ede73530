"""The C++ API for extensions: a custom op built against the public headers and
libtorch_neuronx.so (examples/cpp_extension/scaled_add.cpp, built with
torch.utils.cpp_extension) launches its kernel on the current neuron stream.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import torch

import torch_neuronx
from torch_neuronx import cpp_extension

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cpp_extension" / "scaled_add.cpp"


def test_headers_and_library_ship_with_the_package():
    include = Path(cpp_extension.get_include())
    for header in ("neuron.h", "device.h", "stream.h", "allocator.h", "launch.h", "macros.h"):
        assert (include / "torch_neuronx" / header).is_file(), header
    (libdir,) = cpp_extension.get_library_dirs()
    lib = Path(libdir) / "libtorch_neuronx.so"
    assert lib.is_file()
    assert Path(libdir).parent == Path(torch_neuronx.__file__).parent
    # The bindings module loaded the backend library beside it (its RPATH).
    maps = Path("/proc/self/maps").read_text()
    assert str(lib.resolve()) in maps
    assert cpp_extension.ldflags()[-1] == "-ltorch_neuronx"
    assert cpp_extension.include_paths() == [str(include)]


@pytest.fixture(scope="module")
def scaled_add():
    build = Path(tempfile.mkdtemp(prefix="neuron_cpp_ext_"))
    try:
        # torch.utils.cpp_extension.load with the helpers' flags, as a user would.
        from torch.utils import cpp_extension as torch_ext

        torch_ext.load(
            "neuron_example",
            [str(EXAMPLE)],
            extra_include_paths=cpp_extension.include_paths(),
            extra_ldflags=cpp_extension.ldflags(),
            build_directory=str(build),
            is_python_module=False,
            verbose=False,
        )
        yield torch.ops.neuron_example.scaled_add
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_custom_op_matches_cpu(scaled_add):
    a = torch.randn(37, 19)
    b = torch.randn(37, 19)
    out = scaled_add(a.to("neuron"), b.to("neuron"), 0.25)
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), a + 0.25 * b)
    # Non-contiguous inputs: contiguous() queued before the kernel.
    out = scaled_add(a.to("neuron").t(), b.to("neuron").t(), -2.0)
    torch.testing.assert_close(out.cpu(), a.t() + -2.0 * b.t())


def test_custom_op_runs_on_the_current_stream(scaled_add):
    a = torch.randn(1000)
    b = torch.randn(1000)
    s = torch.neuron.Stream()
    with torch.neuron.stream(s):
        x = a.to("neuron")
        y = b.to("neuron")
        out = scaled_add(x, y, 3.0)
        # Ordered after the copies on s, and on s: the default stream has
        # nothing queued, so waiting for s is what makes the result ready.
        s.synchronize()
        assert s.query()
    torch.testing.assert_close(out.cpu(), a + 3.0 * b)
    # On the second device, when the process has one.
    if torch.neuron.device_count() > 1:
        out = scaled_add(a.to("neuron:1"), b.to("neuron:1"), 0.5)
        assert out.device == torch.device("neuron:1")
        torch.testing.assert_close(out.cpu(), a + 0.5 * b)


def test_custom_op_checks_its_arguments(scaled_add):
    with pytest.raises(RuntimeError, match="float32 tensors expected"):
        scaled_add(
            torch.ones(3, device="neuron", dtype=torch.int32),
            torch.ones(3, device="neuron", dtype=torch.int32),
            1.0,
        )
    with pytest.raises(RuntimeError, match="shape"):
        scaled_add(torch.ones(3, device="neuron"), torch.ones(4, device="neuron"), 1.0)
