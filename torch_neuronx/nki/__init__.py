"""NKI (Neuron Kernel Interface) on torch-neuronx: tile kernels written for
Trainium run on the simulated NeuronCore, checked against its limits and
timed by its cost model.

Users import it under NKI's own names (``import nki``, ``import
nki.language as nl``, ``import nki.isa as nisa``, and the older
``neuronxcc.nki`` spellings); see aliases.py. This package is what those
names load.
"""

from __future__ import annotations

from . import isa, language, legacy_isa, typing  # noqa: F401
from .errors import NKIError
from .kernel import CompiledKernel, GridLaunch, Kernel, as_kernel, compiled_for, jit
from .profile import KernelProfile
from .simulate import baremetal, benchmark, estimate, profile, simulate, simulate_kernel

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
    "estimate",
    "isa",
    "jit",
    "language",
    "profile",
    "simulate",
    "simulate_kernel",
    "typing",
]
