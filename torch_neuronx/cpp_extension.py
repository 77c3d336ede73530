"""Building C++ extensions against the neuron backend's C++ API.

The public headers (``#include <torch_neuronx/neuron.h>``: devices and
``NeuronGuard``, streams and ``NeuronStreamGuard``, synchronisation, the
allocator, launching work on a stream) and ``libtorch_neuronx.so`` ship with the
package. With ``torch.utils.cpp_extension``::

    from torch.utils import cpp_extension
    from torch_neuronx import cpp_extension as neuron_ext

    cpp_extension.load(
        "my_ops", ["my_ops.cpp"],
        extra_include_paths=neuron_ext.include_paths(),
        extra_ldflags=neuron_ext.ldflags(),
        is_python_module=False,
    )

or ``load(...)`` here, which adds both. ``docs/cpp_extensions.md`` has the rest.
"""

from __future__ import annotations

from pathlib import Path

from torch.utils import cpp_extension as _torch_cpp_extension

__all__ = ["get_include", "get_library_dirs", "include_paths", "library_paths", "ldflags", "load"]

_PACKAGE = Path(__file__).resolve().parent


def get_include() -> str:
    """The directory holding ``torch_neuronx/neuron.h`` (an ``-I`` path)."""
    return str(_PACKAGE / "include")


def get_library_dirs() -> list[str]:
    """The directories holding ``libtorch_neuronx.so``."""
    return [str(_PACKAGE / "lib")]


def include_paths() -> list[str]:
    """``extra_include_paths`` for ``torch.utils.cpp_extension``."""
    return [get_include()]


def library_paths() -> list[str]:
    """``library_dirs`` for ``torch.utils.cpp_extension.CppExtension``."""
    return get_library_dirs()


def ldflags() -> list[str]:
    """``extra_ldflags`` that link ``libtorch_neuronx.so`` (and find it at run time)."""
    flags = []
    for d in get_library_dirs():
        flags += [f"-L{d}", f"-Wl,-rpath,{d}"]
    return flags + ["-ltorch_neuronx"]


def load(name: str, sources, *, extra_include_paths=(), extra_ldflags=(), **kwargs):
    """``torch.utils.cpp_extension.load`` with the neuron API's headers and library added."""
    return _torch_cpp_extension.load(
        name,
        sources,
        extra_include_paths=[*include_paths(), *extra_include_paths],
        extra_ldflags=[*ldflags(), *extra_ldflags],
        **kwargs,
    )
