"""Random number generators of the neuron devices (one default generator per device)."""

from __future__ import annotations

import torch

from . import _C
from .device import _DeviceLike, _index, device_count


def manual_seed(seed: int) -> None:
    """Seeds the current device's default generator."""
    _C._manual_seed(_index(None), int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        _C._manual_seed(i, int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def seed() -> None:
    _C._seed(_index(None))


def seed_all() -> None:
    s = _C._seed(0)
    for i in range(1, device_count()):
        _C._manual_seed(i, s)


def initial_seed() -> int:
    return _C._initial_seed(_index(None))


def get_rng_state(device: _DeviceLike = "neuron") -> torch.Tensor:
    """The generator state: 16 bytes, the uint64 seed then the int64 offset."""
    raw = _C._get_rng_state(_index(device))
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).clone()


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state(new_state: torch.Tensor, device: _DeviceLike = "neuron") -> None:
    if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8:
        raise TypeError("neuron RNG state must be a torch.uint8 tensor")
    if new_state.numel() != 16:
        raise ValueError(
            f"neuron RNG state must have 16 bytes (uint64 seed, int64 offset), "
            f"got {new_state.numel()}"
        )
    data = new_state.detach().cpu().contiguous()
    seed = int(data[:8].view(torch.int64).item()) & 0xFFFF_FFFF_FFFF_FFFF
    offset = int(data[8:].view(torch.int64).item())
    _C._set_rng_state(_index(device), seed, offset)


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)
