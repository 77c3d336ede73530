"""Loading safetensors checkpoints onto ``neuron``: a compatibility shim.

The Rust core of ``safetensors`` parses ``device=`` strings against a fixed list
(cpu, cuda, mps, npu, xpu, xla, mlu, musa, hpu) and rejects every other device with
``SafetensorError: device neuron is invalid`` — out-of-tree PyTorch devices cannot
be named at all (upstream: safetensors/safetensors PR #779, "pluggable
device-transfer hook for custom device support", open). The shim makes
``safetensors.torch.load_file`` (and ``load_model``, which calls it) accept
``"neuron"``, ``"neuron:N"`` and ``torch.device("neuron", N)``: the file is read on
the CPU (memory-mapped, as safetensors does) and each tensor copied to the device.
``safe_open`` is left alone; it accepts a device *index* (``device=1``), which torch
resolves to the current accelerator, ``neuron:1``. Saving needs no shim.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import torch

from .import_hooks import on_import
from .monkey_patch import wrap


def _neuron_device(device: Any) -> torch.device | None:
    """``device`` as a neuron torch.device, or None if it names another device."""
    if isinstance(device, str) and (device == "neuron" or device.startswith("neuron:")):
        device = torch.device(device)
    if isinstance(device, torch.device) and device.type == "neuron":
        index = torch.neuron.current_device() if device.index is None else device.index
        count = torch.neuron.device_count()
        if index >= count:
            raise RuntimeError(
                f"cannot load tensors onto neuron:{index}: torch.neuron.device_count() is "
                f"{count}; pass an existing device"
            )
        return torch.device("neuron", index)
    return None


def _patch_safetensors_torch(module: ModuleType) -> None:
    def make(original: Any) -> Any:
        @functools.wraps(original)
        def load_file(filename: Any, device: Any = "cpu", **kwargs: Any) -> dict[str, torch.Tensor]:
            target = _neuron_device(device)
            if target is None:
                return original(filename, device=device, **kwargs)
            tensors = original(filename, device="cpu", **kwargs)
            return {name: t.to(target) for name, t in tensors.items()}

        return load_file

    wrap(module, "load_file", make)


def install() -> None:
    """Applies the shim when ``safetensors.torch`` is imported (now if it is)."""
    on_import("safetensors.torch", _patch_safetensors_torch)
