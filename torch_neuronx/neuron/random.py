"""Random number generators of the neuron devices (one default generator per device)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch

from .. import _C
from .device import _DeviceLike, _index, device_count


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


def _generator(device: _DeviceLike = None) -> torch.Generator:
    """The default generator of ``device`` (the current device by default)."""
    idx = _index(device)
    gen = _DEFAULT_GENERATORS.get(idx)
    if gen is None:
        gen = _DEFAULT_GENERATORS.setdefault(idx, _C._default_generator(idx))
    return gen


# device index -> its default generator, as a torch.Generator (CUDA keeps the
# same objects in torch.cuda.default_generators).
_DEFAULT_GENERATORS: dict[int, torch.Generator] = {}


@functools.cache
def _state_bytes() -> int:
    # The generator's own layout, asked once (set_rng_state runs per op and per
    # rank under LocalTensorMode).
    return _generator().get_state().numel()


def default_generators() -> tuple[torch.Generator, ...]:
    """Every visible device's default generator (``torch.cuda.default_generators``)."""
    return tuple(_generator(i) for i in range(device_count()))


def manual_seed(seed: int) -> None:
    """Seeds the current device's default generator."""
    _generator().manual_seed(_seed_value(seed))


def manual_seed_all(seed: int) -> None:
    value = _seed_value(seed)
    for gen in default_generators():
        gen.manual_seed(value)


def seed() -> None:
    _generator().seed()


def seed_all() -> None:
    gens = default_generators()
    s = gens[0].seed()
    for gen in gens[1:]:
        gen.manual_seed(s)


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: _DeviceLike = "neuron") -> torch.Tensor:
    """The generator state: 16 bytes, the uint64 seed then the int64 offset.

    The generator's own get_state, which builds the tensor without dispatching
    an op: it works under FakeTensorMode and LocalTensorMode, as CUDA's does."""
    return _generator(device).get_state()


def get_rng_state_all() -> list[torch.Tensor]:
    return [gen.get_state() for gen in default_generators()]


def _check_state(new_state: Any) -> torch.Tensor:
    # The same rules as torch.cuda.set_rng_state (a CPU ByteTensor): a state
    # loaded with a device map_location must be moved back with .cpu(). Only
    # metadata is read here (no op is dispatched), so fake and local tensor
    # modes see nothing; the generator checks the offset itself.
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
    expected = _state_bytes()
    if new_state.numel() != expected:
        raise ValueError(
            f"neuron RNG state must have {expected} bytes (uint64 seed, int64 offset), "
            f"got {new_state.numel()}"
        )
    # The generator reads the bytes in order: a strided view is made dense
    # (contiguous() of a dense tensor is the tensor itself, no op).
    return new_state.contiguous()


def set_rng_state(new_state: torch.Tensor, device: _DeviceLike = "neuron") -> None:
    _generator(device).set_state(_check_state(new_state))


def set_rng_state_all(new_states: Sequence[torch.Tensor]) -> None:
    """Sets every device's state; if any state is refused, none is changed."""
    states = [_check_state(state) for state in new_states]
    gens = default_generators()
    if len(states) > len(gens):
        raise ValueError(
            f"Got {len(states)} RNG states but there are only {len(gens)} visible neuron devices"
        )
    before = [gen.get_state() for gen in gens[: len(states)]]
    try:
        for gen, state in zip(gens, states, strict=False):
            gen.set_state(state)
    except Exception:
        for gen, state in zip(gens, before, strict=True):
            gen.set_state(state)
        raise
