"""A wheel built from the tree installs whole.

Builds the wheel as a user would (``pip wheel --no-build-isolation``, against the
installed torch), installs it into a fresh virtual environment that sees the
already-installed torch (no download) but not this source tree or its editable
install, and there imports the package, runs one op, one compiled function, one
NKI kernel and ``import nki``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What a user of the wheel does first.
_SMOKE = """
import sys
import torch  # autoloads the backend from the wheel
import torch_neuronx
import nki
import nki.language as nl
from torch_neuronx import wrap_nki

assert torch_neuronx.__file__.startswith(sys.prefix), torch_neuronx.__file__
print("package", torch_neuronx.__file__)
# _C found the backend library beside it in the wheel (RPATH $ORIGIN/lib).
from torch_neuronx import cpp_extension
lib = cpp_extension.get_library_dirs()[0] + "/libtorch_neuronx.so"
assert lib.startswith(sys.prefix) and lib in open("/proc/self/maps").read(), lib

x = torch.arange(6.0, device="neuron").reshape(2, 3)
assert torch.equal((x * 2).cpu(), torch.arange(6.0).reshape(2, 3) * 2)
print("op ok")

@torch.compile(backend="neuron", fullgraph=True)
def f(a):
    return torch.sin(a) + a.cos()

assert torch.allclose(f(x).cpu(), torch.sin(x.cpu()) + x.cpu().cos())
print("compile ok")

@nki.jit
def add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a) + nl.load(b))
    return out

y = torch.ones(2, 3, device="neuron")
assert torch.equal(wrap_nki(add_kernel)(x, y).cpu(), x.cpu() + 1)
import neuronxcc.nki.language as legacy_nl
served_by = sys.modules[nki.jit.__module__].__file__
assert served_by.startswith(sys.prefix), served_by
assert legacy_nl.load is not None
print("nki ok")
"""


def _run(argv, cwd, timeout, env=None):
    try:
        p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(
            f"{argv[:4]} timed out after {timeout}s\n{e.stdout}\n{e.stderr}"
        ) from None
    assert p.returncode == 0, f"{argv[:4]} failed ({p.returncode})\n{p.stdout}\n{p.stderr}"
    return p.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # setuptools stages packages in build/lib* and reuses what an earlier build
    # left there: a package missing from the configuration would still ship.
    for stale in [*ROOT.glob("build/lib*"), *ROOT.glob("build/bdist*")]:
        shutil.rmtree(stale)
    # In-tree build: the CMake build directory is the one the editable install
    # already built, so this only configures and packages.
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-build-isolation",
            "--no-deps",
            "-w",
            str(out),
            str(ROOT),
        ],
        cwd=out,
        timeout=900,
    )
    wheels = list(out.glob("torch_neuronx-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_holds_every_subpackage_and_the_extension(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = {
        str(p.parent.relative_to(ROOT)).replace(os.sep, "/")
        for p in (ROOT / "torch_neuronx").rglob("__init__.py")
        if "csrc" not in p.parts
    }
    assert {"torch_neuronx", "torch_neuronx/compile", "torch_neuronx/nki"} <= packages
    for pkg in packages:
        for module in (ROOT / pkg).glob("*.py"):
            assert f"{pkg}/{module.name}" in names, f"{pkg}/{module.name} missing from the wheel"
    assert any(n.startswith("torch_neuronx/_C") and n.endswith(".so") for n in names)
    # The backend library _C links, and the C++ API's headers for extensions.
    assert "torch_neuronx/lib/libtorch_neuronx.so" in names
    for header in (ROOT / "torch_neuronx" / "include" / "torch_neuronx").glob("*.h"):
        assert f"torch_neuronx/include/torch_neuronx/{header.name}" in names, header.name
    assert "_torch_neuronx_nki.py" in names and "torch_neuronx_nki.pth" in names
    assert not any("/csrc/" in n for n in names), "C++ sources do not ship"
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "torch_neuronx = torch_neuronx:_autoload" in text
    assert "neuron = torch_neuronx.neuron_dynamo_backend:neuron_backend" in text


def test_wheel_installs_and_runs_in_a_fresh_environment(wheel, tmp_path):
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path, timeout=300)
    py = venv / "bin" / "python"
    # The already-installed torch (and numpy) stay visible through a path entry
    # to their site directory; the editable install's .pth files there are not
    # processed, so only the wheel provides torch_neuronx.
    site = Path(
        _run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            cwd=tmp_path,
            timeout=60,
        ).strip()
    )
    (site / "outer_torch.pth").write_text(sysconfig.get_path("purelib") + "\n")
    _run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        cwd=tmp_path,
        timeout=300,
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_", "TORCH_NEURONX_"))}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    out = _run([str(py), "-c", textwrap.dedent(_SMOKE)], cwd=tmp_path, timeout=600, env=env)
    lines = out.splitlines()
    assert lines[0].startswith(f"package {venv}"), lines
    assert lines[1:] == ["op ok", "compile ok", "nki ok"], out
