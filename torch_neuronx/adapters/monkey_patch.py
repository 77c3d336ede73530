"""Replacing a function of another library (torch's, safetensors', DDP's) once.

torch-neuronx adapts a few third-party functions where they assume CUDA (each
shim's docstring names why). Installing a shim must be idempotent — the module
that installs it can run twice (a reload, an import hook firing after a direct
call) — so every replacement carries one mark, and a function that has it is not
wrapped again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

_MARK = "__torch_neuronx_patch__"

F = TypeVar("F")


def is_patched(fn: Any) -> bool:
    """Whether ``fn`` (a function, or a method bound to one) is a replacement of ours."""
    return bool(getattr(fn, _MARK, False))


def mark(fn: F) -> F:
    """Marks ``fn`` as a replacement of ours; returns it."""
    target = fn.__func__ if isinstance(fn, (classmethod, staticmethod)) else fn
    setattr(target, _MARK, True)
    return fn


def wrap(owner: Any, name: str, make: Callable[[Any], Any]) -> None:
    """Sets ``owner.<name>`` to ``make(original)``, marked — unless it already is ours."""
    original = getattr(owner, name)
    if is_patched(original):
        return
    setattr(owner, name, mark(make(original)))
