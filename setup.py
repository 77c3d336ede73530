"""Builds torch_neuronx._C (and the backend library it links,
torch_neuronx/lib/libtorch_neuronx.so) with CMake + ninja against the installed
torch.

Install with `pip install --no-build-isolation -e .` so that the build uses
the torch already installed (the CPU build) instead of fetching another.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# The backend (everything but the Python bindings), for _C and C++ extensions.
BACKEND_LIBRARY = "libtorch_neuronx.so"


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        target = Path(self.get_ext_fullpath(ext.name)).resolve()
        # The library is built into the source tree, so that `ninja -C build/ext`
        # alone refreshes an editable install; setuptools gets a copy.
        out_dir = ROOT / "torch_neuronx"
        build_dir = Path(os.environ.get("TORCH_NEURONX_BUILD_DIR", ROOT / "build" / "ext"))
        build_dir.mkdir(parents=True, exist_ok=True)
        cfg = [
            "cmake",
            "-S",
            str(ROOT),
            "-B",
            str(build_dir),
            "-G",
            "Ninja",
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DTORCH_NEURONX_OUTPUT_DIR={out_dir}",
            "-DCMAKE_BUILD_TYPE=" + os.environ.get("TORCH_NEURONX_BUILD_TYPE", "Release"),
        ]
        subprocess.check_call(cfg)
        jobs = os.environ.get("MAX_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "_C", "-j", jobs])
        # NumPy types of NKI's MX packed types (optional: without them MX
        # arrays are their uint32/uint16 containers).
        subprocess.call(["cmake", "--build", str(build_dir), "--target", "_mx_numpy", "-j", jobs])
        # _C and the backend library it links (lib/libtorch_neuronx.so, found
        # through _C's RPATH $ORIGIN/lib): both go where setuptools packages
        # from (a wheel's staging directory).
        built = out_dir / target.name
        if built.resolve() != target:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(built, target)
            (target.parent / "lib").mkdir(exist_ok=True)
            shutil.copy2(out_dir / "lib" / BACKEND_LIBRARY, target.parent / "lib")
            for mx in out_dir.glob("_mx_numpy*.so"):
                shutil.copy2(mx, target.parent)


class BuildPy(build_py):
    """Also installs torch_neuronx_nki.pth: at interpreter start it adds the
    finder that serves `import nki` / `import neuronxcc.nki` from
    torch_neuronx when no real NKI installation provides them."""

    def run(self) -> None:
        super().run()
        self.copy_file(
            str(ROOT / "torch_neuronx_nki.pth"),
            os.path.join(self.build_lib, "torch_neuronx_nki.pth"),
        )

    def get_outputs(self, include_bytecode=1):
        return super().get_outputs(include_bytecode) + [
            os.path.join(self.build_lib, "torch_neuronx_nki.pth")
        ]


class _WithNkiPth:
    """An editable-install strategy that also writes torch_neuronx_nki.pth."""

    def __init__(self, strategy) -> None:
        self.strategy = strategy

    def __enter__(self):
        self.strategy.__enter__()
        return self

    def __exit__(self, *exc):
        return self.strategy.__exit__(*exc)

    def __call__(self, wheel, files, mapping) -> None:
        self.strategy(wheel, files, mapping)
        wheel.writestr("torch_neuronx_nki.pth", (ROOT / "torch_neuronx_nki.pth").read_bytes())


cmdclass = {"build_ext": CMakeBuild, "build_py": BuildPy}
try:
    from setuptools.command.editable_wheel import editable_wheel

    class EditableWheel(editable_wheel):
        # Editable wheels leave build_py's extra files out: add the .pth.
        def _select_strategy(self, *args, **kwargs):
            return _WithNkiPth(super()._select_strategy(*args, **kwargs))

    cmdclass["editable_wheel"] = EditableWheel
except ImportError:  # older setuptools: `import torch` still installs the finder
    pass

setup(
    ext_modules=[CMakeExtension("torch_neuronx._C")],
    cmdclass=cmdclass,
)
