"""Random number generators of the neuron devices (one default generator per device)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from . import _C
from .device import _DeviceLike, _index, device_count

_STATE_BYTES = 16  # uint64 seed, then int64 offset
_OFFSET_STEP = 4  # every random op advances the offset by 4 (NeuronGeneratorImpl::kOffsetStep)


def _seed_value(seed: Any) -> int:
    """``seed`` as the uint64 the generator keeps.

    As torch.manual_seed: anything int() accepts, in [-2**63, 2**64); negative
    seeds wrap (-1 is 2**64 - 1). A larger seed is an error rather than being
    silently truncated to its low 64 bits.
    """
    try:
        value = int(seed)
    except TypeError as e:
        raise TypeError(f"A seed must be an integer, got {type(seed).__name__}") from e
    except (ValueError, OverflowError) as e:  # "abc", nan, inf
        raise ValueError(f"A seed must be an integer, got {seed!r}") from e
    if not -(2**63) <= value < 2**64:
        raise ValueError(f"Seed {value} is out of range: a seed must be in [-2**63, 2**64)")
    return value & 0xFFFF_FFFF_FFFF_FFFF


def manual_seed(seed: int) -> None:
    """Seeds the current device's default generator."""
    _C._manual_seed(_index(None), _seed_value(seed))


def manual_seed_all(seed: int) -> None:
    value = _seed_value(seed)
    for i in range(device_count()):
        _C._manual_seed(i, value)


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


def _check_state(new_state: Any) -> None:
    # The same rules as torch.cuda.set_rng_state (a CPU ByteTensor): a state
    # loaded with a device map_location must be moved back with .cpu().
    if not isinstance(new_state, torch.Tensor):
        raise TypeError(
            f"RNG state must be a torch.uint8 tensor (ByteTensor), got {type(new_state).__name__}"
        )
    if new_state.device.type != "cpu" or new_state.layout != torch.strided:
        raise TypeError(
            f"RNG state must be a CPU torch.uint8 tensor, got one on {new_state.device} "
            "(move it with .cpu())"
        )
    if new_state.dtype != torch.uint8:
        raise TypeError(f"RNG state must be a torch.uint8 tensor, got {new_state.dtype}")
    if new_state.numel() != _STATE_BYTES:
        raise ValueError(
            f"neuron RNG state must have {_STATE_BYTES} bytes (uint64 seed, int64 offset), "
            f"got {new_state.numel()}"
        )


def _seed_and_offset(new_state: torch.Tensor) -> tuple[int, int]:
    # clone(): a fresh, aligned buffer, whatever view of a larger tensor came in.
    data = new_state.detach().clone().view(torch.int64)
    seed = int(data[0].item()) & 0xFFFF_FFFF_FFFF_FFFF
    offset = int(data[1].item())
    if offset < 0 or offset % _OFFSET_STEP:
        # RuntimeError, as the generator's own check (Generator.set_offset).
        raise RuntimeError(
            f"invalid neuron RNG state: offset {offset} is not a non-negative multiple of "
            f"{_OFFSET_STEP}"
        )
    return seed, offset


def set_rng_state(new_state: torch.Tensor, device: _DeviceLike = "neuron") -> None:
    _check_state(new_state)
    idx = _index(device)
    _C._set_rng_state(idx, *_seed_and_offset(new_state))


def set_rng_state_all(new_states: Sequence[torch.Tensor]) -> None:
    """Sets every device's state; all are checked before any is set."""
    states = list(new_states)
    if len(states) > device_count():
        raise ValueError(
            f"Got {len(states)} RNG states but there are only {device_count()} visible "
            "neuron devices"
        )
    for state in states:
        _check_state(state)
    parsed = [_seed_and_offset(state) for state in states]
    for i, (seed, offset) in enumerate(parsed):
        _C._set_rng_state(i, seed, offset)
