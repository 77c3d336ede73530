"""Running a patch right after a module is first imported: the one helper the
compatibility shims share (each shim lives beside the feature it serves).

A shim installed this way costs nothing until the library it patches is
imported, and applies at once if that library is already imported.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Runs ``patch(module)`` right after the module ``name`` is first executed."""

    def __init__(self, name: str, patch: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.patch = patch

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        spec = None
        for finder in sys.meta_path:  # the finders after this one (editable installs too)
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        # The module's own loader stays (source, resources); only this spec's
        # loader instance runs the patch after executing the module.
        loader = spec.loader
        exec_module = loader.exec_module
        patch = self.patch

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            patch(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def on_import(name: str, patch: Callable[[ModuleType], None]) -> None:
    """``patch(module)`` now if ``name`` is imported, else when it is."""
    if name in sys.modules:
        patch(sys.modules[name])
    elif not any(isinstance(f, _PatchOnImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport(name, patch))
