"""Adaptive eager: repeated sequences of eager ops run as one device work item.

A stream notices a sequence of eager work items that repeats between
synchronization points (a training or decode step) and, once it has seen it
``threshold`` times (default 2), runs its next occurrences as ONE work item:
the ops are still called, checked and allocated one by one on the host,
returning their tensors where plain eager would, while the device runs them
together when the sequence is complete or a synchronization point arrives.
The items are plain eager's own, run in plain eager's order, so results,
errors, RNG, memory and stream semantics are plain eager's. A deviation (a
different op or argument signature) runs what was held and goes on plainly.
Chains of elementwise ops inside an adapted sequence (a bias, GELU, residual
and LayerNorm; an optimizer's per-parameter update) run as fused passes, tile by
tile, with the ops' own kernels: the same bits, less memory traffic. See
docs/device.md ("Adaptive eager") for what counts as a synchronization point and
what is fused.

Off by default. ``TORCH_NEURONX_ADAPTIVE_EAGER=1`` or ``set_adaptive_eager(True)``
turns it on; ``NEURON_LAUNCH_BLOCKING=1`` keeps it off (every op waits anyway).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator

from .. import _C

ENV_VAR = "TORCH_NEURONX_ADAPTIVE_EAGER"

__all__ = [
    "adaptive_eager",
    "adaptive_eager_stats",
    "is_adaptive_eager_enabled",
    "reset_adaptive_eager",
    "reset_adaptive_eager_stats",
    "set_adaptive_eager",
]


def set_adaptive_eager(
    enabled: bool, *, threshold: int | None = None, fuse: bool | None = None
) -> None:
    """Turns adaptive eager on or off for the process (what the streams learned is
    kept: switching it off and on again per step does not start over; see
    ``reset_adaptive_eager``). ``threshold``: how often a sequence must have been
    seen before its next occurrences run as one item. ``fuse`` (default on): chains
    of elementwise ops in an adapted sequence run as fused passes, tile by tile,
    with the same results bit for bit; ``fuse=False`` runs them one by one."""
    if fuse is not None:
        _C._adaptive_set_fuse(bool(fuse))
    if threshold is not None:
        if not isinstance(threshold, int) or threshold < 1:
            raise ValueError(f"threshold must be a positive int, got {threshold!r}")
        _C._adaptive_configure(threshold, 0, 0)
    if enabled and _C._launch_blocking():
        warnings.warn(
            "adaptive eager stays off: NEURON_LAUNCH_BLOCKING=1 runs every op synchronously",
            stacklevel=2,
        )
        return
    _C._adaptive_set_enabled(bool(enabled))


def is_adaptive_eager_enabled() -> bool:
    return _C._adaptive_enabled()


@contextlib.contextmanager
def adaptive_eager(enabled: bool = True) -> Iterator[None]:
    """Adaptive eager on (or off) inside the block, as it was after it."""
    before = is_adaptive_eager_enabled()
    set_adaptive_eager(enabled)
    try:
        yield
    finally:
        _C._adaptive_set_enabled(before)


def adaptive_eager_stats() -> dict[str, int]:
    """What adaptive eager did in this process: ``windows`` (work between
    synchronization points, recorded), ``sequences_adapted``, ``replays`` (complete
    sequences run as one item), ``deviations``, ``items_in_replays``,
    ``evictions`` and ``cached_sequences`` (the per-stream LRU caches),
    ``streams_given_up`` (streams whose work never repeated), ``hit_rate``
    (replays / (replays + deviations)).

    Sequences that never come back (decoding with a growing KV cache: every token's
    window is the last one's ops on longer shapes): ``sequences_never_replayed``
    (evicted without a single replay; counted in ``evictions`` too),
    ``families_stopped`` (op sequences, shapes aside, that a stream stopped adapting
    after ``max_fruitless_adaptations`` of them in a row were evicted unreplayed),
    ``windows_not_adapted`` (windows and periods seen ``threshold`` times but not
    adapted: their family was stopped and they did not come back within
    ``max_sequences`` windows). Also the settings: ``threshold``, ``max_sequences``,
    ``max_fruitless_windows``, ``max_fruitless_adaptations``, ``fuse``.

    Fusion: ``fused_groups`` (fused passes run: chains of an adapted sequence's
    elementwise ops run tile by tile as one step) and ``items_fused`` (the ops
    they ran)."""
    stats = dict(_C._adaptive_stats())
    tried = stats["replays"] + stats["deviations"]
    stats["hit_rate"] = stats["replays"] / tried if tried else 0.0
    stats["enabled"] = is_adaptive_eager_enabled()
    stats.update(_C._adaptive_settings())
    return stats


def reset_adaptive_eager_stats() -> None:
    _C._adaptive_reset_stats()


def reset_adaptive_eager() -> None:
    """Every stream forgets the sequences it adapted, what it counted and whether
    it gave up (a new model, new shapes); the statistics start at zero."""
    _C._adaptive_forget()
    _C._adaptive_reset_stats()


def apply_env() -> None:
    """TORCH_NEURONX_ADAPTIVE_EAGER at import: 1/true on, 0/false/unset off."""
    value = os.environ.get(ENV_VAR, "").strip().lower()
    if value in ("", "0", "false"):
        return
    if value not in ("1", "true"):
        warnings.warn(
            f"{ENV_VAR}={os.environ[ENV_VAR]!r} is not 0 or 1: adaptive eager stays off",
            stacklevel=2,
        )
        return
    set_adaptive_eager(True)
