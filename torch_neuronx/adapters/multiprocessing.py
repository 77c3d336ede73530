"""Neuron tensors and ``torch.multiprocessing``: a clear refusal instead of a torch error.

A neuron tensor's memory lives in the HBM of the process that allocated it; it
cannot be mapped into another process. torch.multiprocessing's reducers send every
non-CUDA storage through CPU shared memory (``storage._share_fd_cpu_()``), which
fails for a neuron storage with "_share_fd_: only available on CPU" — true, but it
does not say what to do. This module registers reducers for tensors and storages
(through ``multiprocessing.reduction.register``, the mechanism torch uses itself)
that raise a RuntimeError saying so, and hand everything else to torch's reducers.

Pickling normally happens in the sender (Process arguments under spawn,
``Connection.send``, ``SimpleQueue.put``), so that is where it raises. A
``multiprocessing.Queue`` pickles in its feeder thread instead, where an exception
is only printed and the item dropped, so the receiver's ``get()`` would wait
forever; there the item is replaced by one that raises the same error in the
receiver's ``get()``.
"""

from __future__ import annotations

import threading
import warnings
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch
import torch.multiprocessing.reductions as _torch_reductions

NOT_SHAREABLE = (
    "neuron tensors cannot be shared between processes (sending a neuron {what} "
    "through torch.multiprocessing is not supported): device memory belongs to the "
    "process that allocated it. Move it to the CPU first (t.cpu(), or "
    "t.cpu().share_memory_() to share without further copies) and back to the "
    "device in the receiving process with .to('neuron')."
)


def _is_neuron(obj: Any) -> bool:
    return getattr(obj, "device", None) is not None and obj.device.type == "neuron"


def _raise_not_shareable(message: str) -> None:
    # Runs in the receiving process, in place of rebuilding the object.
    raise RuntimeError(message)


def _refuse(what: str) -> tuple:
    message = NOT_SHAREABLE.format(what=what)
    if threading.current_thread().name == "QueueFeederThread":
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        return (_raise_not_shareable, (message,))
    raise RuntimeError(message)


def _reduce_tensor(tensor: torch.Tensor) -> tuple:
    if _is_neuron(tensor):
        return _refuse("tensor")
    return _torch_reductions.reduce_tensor(tensor)


def _reduce_storage(storage: torch.UntypedStorage) -> tuple:
    if _is_neuron(storage):
        return _refuse("storage")
    return _torch_reductions.reduce_storage(storage)


def _reduce_typed_storage(storage: torch.TypedStorage) -> tuple:
    if _is_neuron(storage._untyped_storage):  # .device would warn (deprecated)
        return _refuse("storage")
    return _torch_reductions.reduce_typed_storage(storage)


def register_reducers() -> None:
    """Installs the reducers (at import of torch_neuronx, after torch's own)."""
    for cls in (torch.Tensor, torch.nn.Parameter):
        ForkingPickler.register(cls, _reduce_tensor)
    ForkingPickler.register(torch.UntypedStorage, _reduce_storage)
    ForkingPickler.register(torch.TypedStorage, _reduce_typed_storage)
