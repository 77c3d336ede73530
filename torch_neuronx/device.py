"""Device management: which neuron devices exist and which one is current."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from . import _C

_DeviceLike = torch.device | str | int | None


def _index(device: _DeviceLike = None, optional: bool = True) -> int:
    """Device index of ``device`` (None means the current device)."""
    if device is None:
        return current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "neuron":
            raise ValueError(f"Expected a neuron device, but got: {device}")
        return current_device() if device.index is None else device.index
    if isinstance(device, int):
        return device
    raise TypeError(f"Expected a neuron device or index, got {type(device).__name__}")


def _lazy_init() -> None:
    """Starts the runtime (on first device use, never at import)."""
    if _C._is_in_bad_fork():
        raise RuntimeError(
            "Cannot re-initialize neuron in forked subprocess. To use neuron with "
            "multiprocessing, you must use the 'spawn' start method"
        )
    _C._init()


def is_available() -> bool:
    """True if at least one neuron device is visible."""
    try:
        return device_count() > 0
    except RuntimeError:
        return False


def device_count() -> int:
    """Number of visible neuron devices (NEURON_RT_VISIBLE_CORES selects them)."""
    return _C._device_count()


def is_initialized() -> bool:
    return _C._is_initialized() and not _C._is_in_bad_fork()


def init() -> None:
    _lazy_init()


def current_device() -> int:
    return _C._get_device()


def set_device(device: _DeviceLike) -> None:
    idx = _index(device)
    if idx >= 0:
        _C._set_device(idx)


class device:
    """Context manager that makes ``device`` current (a negative index is a no-op)."""

    def __init__(self, device: Any) -> None:
        self.idx = -1 if device is None else _index(device)
        self.prev_idx = -1

    def __enter__(self) -> None:
        self.prev_idx = _C._exchange_device(self.idx)

    def __exit__(self, *exc: object) -> bool:
        if self.idx >= 0:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of ``obj`` (a neuron tensor) current."""

    def __init__(self, obj: torch.Tensor) -> None:
        super().__init__(obj.get_device() if obj.device.type == "neuron" else -1)


@dataclass(frozen=True)
class NeuronDeviceProperties:
    name: str
    total_memory: int
    logical_core: int
    chip: int
    physical_cores_per_logical_core: int
    logical_cores_per_chip: int
    num_chips: int

    def __repr__(self) -> str:
        return (
            f"NeuronDeviceProperties(name='{self.name}', total_memory="
            f"{self.total_memory // (1 << 20)}MB, logical_core={self.logical_core}, "
            f"chip={self.chip}, physical_cores_per_logical_core="
            f"{self.physical_cores_per_logical_core})"
        )


def get_device_properties(device: _DeviceLike = None) -> NeuronDeviceProperties:
    return NeuronDeviceProperties(**_C._device_properties(_index(device)))


def get_device_name(device: _DeviceLike = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: _DeviceLike = None) -> tuple[int, int]:
    get_device_properties(device)  # validates the index
    return (3, 0)


def synchronize(device: _DeviceLike = None) -> None:
    """Waits for all work on ``device`` and raises any device error it hit."""
    _lazy_init()
    _C._synchronize(_index(device))


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def launch_blocking() -> bool:
    """True when NEURON_LAUNCH_BLOCKING=1: every op waits for the device."""
    return bool(_C._launch_blocking())
