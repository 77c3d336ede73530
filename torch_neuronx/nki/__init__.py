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
    "KernelProfile": ".profile",
    "default_target": ".profile",
    "hardware_targets": ".profile",
    "baremetal": ".simulate",
    "benchmark": ".simulate",
    "estimate": ".simulate",
    "profile": ".simulate",
    "simulate": ".simulate",
    "simulate_kernel": ".simulate",
}
_SUBMODULES = ("isa", "language", "legacy_isa", "typing")


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name], __name__), name)
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
