"""NKI (Neuron Kernel Interface) on torch-neuronx: tile kernels written for
Trainium run on the simulated NeuronCore, checked against its limits and
timed by its cost model.

Users import it under NKI's own names (``import nki``, ``import
nki.language as nl``, ``import nki.isa as nisa``, and the older
``neuronxcc.nki`` spellings); the import finder that maps those names is
``_torch_neuronx_nki.py`` at the top of the source tree (installed by
``torch_neuronx_nki.pth``). This package is what those names load.
"""

from __future__ import annotations

import importlib

# Loaded on first use: `import torch` imports this package (the ATen routing
# in aten_routing.py lives here), and the language is ~30 ms of imports.
_WHERE = {
    "NKIError": ".errors",
    "CompiledKernel": ".kernel",
    "GridLaunch": ".kernel",
    "Kernel": ".kernel",
    "as_kernel": ".kernel",
    "compiled_for": ".kernel",
    "jit": ".kernel",
    "KernelProfile": ".kernel_profile",
    "default_target": ".kernel_profile",
    "hardware_targets": ".kernel_profile",
    # No submodule may be named like one of these functions: importing it
    # would set the package attribute (nki.simulate, nki.profile) to the
    # module instead.
    "baremetal": ".standalone",
    "benchmark": ".standalone",
    "estimate": ".standalone",
    "profile": ".standalone",
    "simulate": ".standalone",
    "simulate_kernel": ".standalone",
}
# NKI's names for things that are called otherwise here: ``nki.dtype`` is the
# type of ``nl.float32``, ``nl.bfloat16``, ... (kernels annotate with it).
_RENAMED = {"dtype": (".dtypes", "DType")}
_SUBMODULES = ("isa", "language", "legacy_isa", "typing")


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _WHERE or name in _RENAMED:
        module, attr = _RENAMED.get(name, (_WHERE.get(name), name))
        value = getattr(importlib.import_module(module, __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "NKIError",
    "CompiledKernel",
    "GridLaunch",
    "Kernel",
    "KernelProfile",
    "as_kernel",
    "baremetal",
    "benchmark",
    "compiled_for",
    "default_target",
    "dtype",
    "estimate",
    "hardware_targets",
    "isa",
    "jit",
    "language",
    "profile",
    "simulate",
    "simulate_kernel",
    "typing",
]
