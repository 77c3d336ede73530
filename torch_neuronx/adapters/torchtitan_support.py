"""TorchTitan on ``neuron`` with a torch that has no Triton: a compatibility shim.

TorchTitan imports ``triton`` unconditionally in one module every model imports —
0.2.x in ``torchtitan/models/moe/kernels.py`` (a Triton kernel that builds the MoE
token permutation on CUDA, beside a CPU implementation), 0.3.x in
``torchtitan/distributed/minimal_async_ep/kernels.py`` (the CUDA kernels of its
asynchronous expert parallelism): on PyPI's CPU torch, and on any machine without
Triton, ``import torchtitan.train`` fails with ``ModuleNotFoundError: No module
named 'triton'``. Installing Triton
(~1 GB) would change what torch itself does wherever it checks for Triton.

The shim gives those modules a stand-in ``triton`` of their own — bound in the
module's import machinery only, never in ``sys.modules``, so torch keeps seeing no
Triton — in which ``triton.jit`` returns the function and ``triton.language``
holds the names the modules read when they are defined. The 0.2.x permutation
then takes TorchTitan's CPU implementation on neuron (its ``use_cpu`` path; the
Triton kernel is CUDA's); 0.3.x's kernels are called only on CUDA tensors. Nothing
changes where Triton is installed.
"""

from __future__ import annotations

import builtins
import importlib.abc
import importlib.util
import sys
import types
from typing import Any

# Module -> what to adjust once it is loaded.
_MODULES = {
    "torchtitan.models.moe.kernels": lambda m: _use_cpu_permutation_off_cuda(m),
    "torchtitan.distributed.minimal_async_ep.kernels": lambda m: None,
}


def _triton_stand_in() -> tuple[types.ModuleType, types.ModuleType]:
    triton = types.ModuleType("triton")
    language = types.ModuleType("triton.language")

    def jit(fn=None, **_kwargs):
        return fn if fn is not None else (lambda f: f)

    triton.jit = jit  # also @triton.jit(do_not_specialize=[...])
    # Launch-grid helpers (only CUDA code paths call them).
    triton.cdiv = lambda a, b: -(-a // b)
    triton.next_power_of_2 = lambda n: 1 if n <= 1 else 1 << (int(n) - 1).bit_length()
    language.constexpr = object  # an annotation of the kernel's parameters
    triton.language = language
    return triton, language


class _StandInLoader(importlib.abc.Loader):
    """Executes the module with ``import triton`` answered by the stand-in."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        triton, language = _triton_stand_in()
        stand_ins = {"triton": triton, "triton.language": language}
        real_import = builtins.__import__

        def import_(name, globals=None, locals=None, fromlist=(), level=0):
            if level == 0 and name in stand_ins:
                return stand_ins[name] if fromlist else triton
            return real_import(name, globals, locals, fromlist, level)

        module.__dict__["__builtins__"] = {**builtins.__dict__, "__import__": import_}
        exec(self.loader.get_code(module.__name__), module.__dict__)
        _MODULES[module.__name__](module)


def _use_cpu_permutation_off_cuda(kernels: types.ModuleType) -> None:
    upstream = kernels.generate_permute_indices

    def generate_permute_indices(tokens_per_expert_group, *args, use_cpu: bool = False, **kw):
        use_cpu = use_cpu or tokens_per_expert_group.device.type != "cuda"
        return upstream(tokens_per_expert_group, *args, use_cpu=use_cpu, **kw)

    kernels.generate_permute_indices = generate_permute_indices


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None):
        if fullname not in _MODULES or importlib.util.find_spec("triton") is not None:
            return None
        for finder in sys.meta_path:  # the finders after this one
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                spec.loader = _StandInLoader(spec.loader)
                return spec
        return None


def install() -> None:
    """Called once when torch_neuronx loads (before TorchTitan is imported)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
