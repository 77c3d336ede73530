"""``import nki`` and ``import neuronxcc.nki``: NKI's own import names, served
by torch-neuronx's implementation — unless a real NKI installation provides
them.

The finder sits at the END of ``sys.meta_path``: Python's own finders look
first, so an installed ``nki`` or ``neuronx-cc`` package wins and is never
shadowed. Only names nothing else provides come here. This module is
top-level and imports nothing heavy: the ``torch_neuronx_nki.pth`` file
installs the finder at interpreter start (so ``import nki`` works before
``import torch``); the implementation (and torch) load on first use.

- ``nki``, ``nki.language``, ``nki.isa`` (destination-first),
  ``nki.isa.constants``, ``nki.typing``, ``nki.dtype`` (the element types; a
  module that ``isinstance`` also accepts as their type)
- ``nki.collectives`` (collectives between ranks; ``run_ranks`` launches a
  kernel on several ranks)
- ``neuronxcc``, ``neuronxcc.nki``, ``neuronxcc.nki.language``,
  ``neuronxcc.nki.isa`` (the original form, returning tiles),
  ``neuronxcc.nki.isa.constants``, ``neuronxcc.nki.typing``
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

# alias -> (implementation module, which isa the package exposes)
_TARGETS = {
    "nki": ("torch_neuronx.nki", "isa"),
    "nki.language": ("torch_neuronx.nki.language", None),
    "nki.isa": ("torch_neuronx.nki.isa", None),
    "nki.isa.constants": ("torch_neuronx.nki.isa_constants", None),
    "nki.typing": ("torch_neuronx.nki.typing", None),
    "nki.dtype": ("torch_neuronx.nki.dtype_module", None),
    "nki.collectives": ("torch_neuronx.nki.collectives", None),
    "neuronxcc": (None, None),
    "neuronxcc.nki": ("torch_neuronx.nki", "legacy_isa"),
    "neuronxcc.nki.language": ("torch_neuronx.nki.language", None),
    "neuronxcc.nki.isa": ("torch_neuronx.nki.legacy_isa", None),
    "neuronxcc.nki.isa.constants": ("torch_neuronx.nki.isa_constants", None),
    "neuronxcc.nki.typing": ("torch_neuronx.nki.typing", None),
}
# The aliases that have submodules (``from nki.isa.constants import oob_mode``
# needs ``nki.isa`` to be a package, as it is in NKI).
_PACKAGES = frozenset({"nki", "nki.isa", "neuronxcc", "neuronxcc.nki", "neuronxcc.nki.isa"})


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        target, isa = _TARGETS[spec.name]
        impl = importlib.import_module(target) if target is not None else None
        # A module with its own type (nki.dtype: DTypeModule) holds NAMES.
        module = getattr(impl, "DTypeModule", types.ModuleType)(spec.name)
        if impl is not None and hasattr(impl, "NAMES"):
            for k, v in impl.NAMES.items():
                setattr(module, k, v)
            module.__doc__ = impl.__doc__
        elif impl is not None:
            for k, v in vars(impl).items():
                if not k.startswith("__"):
                    setattr(module, k, v)
            for k in getattr(impl, "__all__", ()):  # a package's lazy names
                setattr(module, k, getattr(impl, k))
            module.__doc__ = impl.__doc__
            if isa is not None:
                module.isa = importlib.import_module(f"torch_neuronx.nki.{isa}")
        # Packages: their submodules are found here too.
        if spec.name in _PACKAGES:
            module.__path__ = []
        module.__torch_neuronx__ = True  # served by torch-neuronx's simulator
        return module

    def exec_module(self, module):
        pass


class NkiAliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _TARGETS:
            return None
        is_pkg = fullname in _PACKAGES
        return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=is_pkg)


def install() -> None:
    """Adds the finder at the end of sys.meta_path (once)."""
    if not any(isinstance(f, NkiAliasFinder) for f in sys.meta_path):
        sys.meta_path.append(NkiAliasFinder())


install()
