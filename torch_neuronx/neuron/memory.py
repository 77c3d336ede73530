"""Device memory: the caching allocator's statistics and controls."""

from __future__ import annotations

import pickle
import sys
from collections import OrderedDict
from typing import Any

import torch

from .. import _C
from .device import _DeviceLike, _index, _lazy_init, is_initialized


def _ready() -> bool:
    # False in a child forked after the parent started the runtime: what it
    # inherited is the parent's, as with CUDA.
    return is_initialized()


def _stats(device: _DeviceLike) -> OrderedDict[str, Any]:
    """CUDA's dotted statistics of one device (empty before the runtime starts)."""
    idx = _index(device)
    if not _ready():
        return OrderedDict()
    return torch.accelerator.memory_stats(idx)


# TorchNeuron's flat names, derived from CUDA's keys: code written for the
# vendor backend reads stats["allocated_bytes"]["peak"] or stats["num_ooms"].
_FLAT_CURRENT_PEAK = ("allocated_bytes", "reserved_bytes", "active_bytes")
_FLAT_COUNTS = {
    "num_alloc_retries": "num_alloc_retries",
    "num_ooms": "num_ooms",
    "num_tensor_frees": "allocation.all.freed",
    "allocation_requests": "allocation.all.allocated",
}


def _add_flat_keys(stats: OrderedDict[str, Any]) -> OrderedDict[str, Any]:
    flat: dict[str, Any] = {
        name: {
            "current": stats.get(f"{name}.all.current", 0),
            "peak": stats.get(f"{name}.all.peak", 0),
        }
        for name in _FLAT_CURRENT_PEAK
    }
    flat.update({name: stats.get(key, 0) for name, key in _FLAT_COUNTS.items()})
    return OrderedDict(sorted({**stats, **flat}.items()))


def memory_stats(device: _DeviceLike = None) -> OrderedDict[str, Any]:
    """Statistics of one device's caching allocator, sorted by key.

    CUDA's keys ("allocated_bytes.all.current", "num_ooms", ...), plus TorchNeuron's
    flat ones: "allocated_bytes", "reserved_bytes" and "active_bytes" (each a dict
    with "current" and "peak"), "num_alloc_retries", "num_ooms", "num_tensor_frees"
    and "allocation_requests". Empty, as on CUDA, before the runtime has started.
    """
    stats = _stats(device)
    return _add_flat_keys(stats) if stats else stats


def memory_allocated(device: _DeviceLike = None) -> int:
    """Bytes of device memory occupied by tensors."""
    return _stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device: _DeviceLike = None) -> int:
    return _stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device: _DeviceLike = None) -> int:
    """Bytes held by the caching allocator (in use or cached)."""
    return _stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device: _DeviceLike = None) -> int:
    return _stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    idx = _index(device)
    if _ready():
        torch.accelerator.reset_peak_memory_stats(idx)


def reset_accumulated_memory_stats(device: _DeviceLike = None) -> None:
    idx = _index(device)
    if _ready():
        torch.accelerator.reset_accumulated_memory_stats(idx)


def empty_cache() -> None:
    """Returns cached, unused device memory to the runtime (and its pages to the OS)."""
    if _ready():
        _C._empty_cache()


def mem_get_info(device: _DeviceLike = None) -> tuple[int, int]:
    """(free, total) bytes of the device's HBM."""
    idx = _index(device)
    _lazy_init()
    return torch.accelerator.get_memory_info(idx)


def set_per_process_memory_fraction(fraction: float, device: _DeviceLike = None) -> None:
    """Caps what this process may reserve on ``device`` at ``fraction`` of its capacity.

    Allocations that would take the caching allocator past the cap raise
    ``torch.OutOfMemoryError`` (after it has given cached memory back and retried),
    as on CUDA. ``fraction`` is a float in (0, 1]; 1 lifts the cap.
    """
    idx = _index(device)
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: (0, 1]")
    _lazy_init()
    _C._set_memory_fraction(fraction, idx)


def get_per_process_memory_fraction(device: _DeviceLike = None) -> float:
    """The fraction of ``device``'s capacity this process may reserve (1.0: no cap)."""
    return _C._get_memory_fraction(_index(device))  # starts no runtime


def _snapshot(device: _DeviceLike = None) -> dict[str, Any]:
    """Every segment of device memory and its blocks, in CUDA's snapshot layout.

    ``{"segments": [...], "device_traces": [[...], ...]}``. Each segment has its
    ``device``, ``address``, ``total_size``, ``allocated_size``, ``stream`` and
    ``segment_type`` ("small"/"large") and ``blocks``; each block its ``address``,
    ``size``, ``requested_size``, ``state`` ("active_allocated",
    "active_pending_free" or "inactive"), ``op`` (the work that allocated it) and
    ``frames`` (its Python stack, while :func:`_record_memory_history` records
    stacks). ``device_traces`` holds the recorded alloc/free events of each device.
    ``device`` is accepted for CUDA compatibility; all devices are included.
    """
    if device is not None:
        _index(device)  # validated only: every device is included
    if not _ready():
        return {"segments": [], "device_traces": []}
    return _C._memory_snapshot()


def memory_snapshot() -> list[dict[str, Any]]:
    """The segments of :func:`_snapshot`: what device memory is held, block by block."""
    return _snapshot()["segments"]


def _record_memory_history(
    enabled: str | None = "all",
    context: str | None = "all",
    stacks: str = "all",
    max_entries: int = sys.maxsize,
    device: _DeviceLike = None,
) -> None:
    """Starts (or, with ``enabled=None``, stops) recording allocation history.

    As on CUDA: ``enabled="state"`` records the Python stack of each live block;
    ``"all"`` also keeps a trace of the last ``max_entries`` alloc/free events per
    device (``_snapshot()["device_traces"]``). ``context=None`` records no stacks.
    Only Python frames are recorded (``stacks="all"`` means the same as
    ``"python"``). Starting or stopping drops what was recorded before.
    """
    if enabled not in (None, "state", "all"):
        raise ValueError(f"enabled must be None, 'state' or 'all', got {enabled!r}")
    if context not in (None, "state", "alloc", "all"):
        raise ValueError(f"context must be None, 'state', 'alloc' or 'all', got {context!r}")
    if stacks not in ("python", "all"):
        raise ValueError(f"stacks must be 'python' or 'all', got {stacks!r}")
    if not isinstance(max_entries, int) or max_entries < 0:
        raise ValueError(f"max_entries must be a non-negative int, got {max_entries!r}")
    if device is not None:
        _index(device)  # validated only: recording covers every device
    on = enabled is not None
    trace_entries = min(max_entries, sys.maxsize) if enabled == "all" else 0
    _C._record_memory_history(on, on and context is not None, trace_entries)


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Pickles :func:`_snapshot` to ``filename`` (as ``torch.cuda.memory._dump_snapshot``)."""
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


def _format_size(n: int, pref: int) -> str:
    # CUDA's memory_summary units: the unit is chosen by the row's first value.
    prefix = "B  "
    for new_prefix in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if pref < 768 * 1024:
            break
        prefix = new_prefix
        n //= 1024
        pref /= 1024
    return f"{n:6d} {prefix}"


def _format_count(n: int, pref: int) -> str:
    prefix = " "
    for new_prefix in ("K", "M"):
        if pref < 750 * 1000:
            break
        prefix = new_prefix
        n //= 1000
        pref /= 1000
    return f"{n:7d} {prefix} "


def memory_summary(device: _DeviceLike = None, abbreviated: bool = False) -> str:
    """The allocator's statistics as a table, laid out as ``torch.cuda.memory_summary``.

    Rows: allocated, active, requested, reserved and non-releasable memory, then the
    matching counts, each split into the large and small pools unless
    ``abbreviated``; columns: current, peak, total allocated and total freed. The
    allocator has no ``max_split_size``, so its oversize rows stay at zero.
    """
    idx = _index(device)
    stats = _stats(idx)
    width = 78  # CUDA's 75, with room for the longer row names
    metrics = [
        ("allocated_bytes", "Allocated memory", _format_size),
        ("active_bytes", "Active memory", _format_size),
        ("requested_bytes", "Requested memory", _format_size),
        ("reserved_bytes", "Device reserved memory", _format_size),
        ("inactive_split_bytes", "Non-releasable memory", _format_size),
        ("allocation", "Allocations", _format_count),
        ("active", "Active allocs", _format_count),
        ("segment", "Device reserved segments", _format_count),
        ("inactive_split", "Non-releasable allocs", _format_count),
    ]
    cols = ("current", "peak", "allocated", "freed")
    lines = ["=" * width]
    lines.append(f" PyTorch neuron memory summary, device neuron:{idx}".center(width))
    lines.append("-" * width)
    ooms = stats.get("num_ooms", 0)
    retries = stats.get("num_alloc_retries", 0)
    lines.append(f"  neuron OOMs: {ooms:<12d} | HBM allocation retries: {retries:<8d}".ljust(width))
    fraction = get_per_process_memory_fraction(idx) if _ready() else 1.0
    if fraction < 1.0:
        lines.append(f"  per-process memory fraction: {fraction:g}".ljust(width))
    lines.append("=" * width)
    heads = ("Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed")
    lines.append(f" {'Metric':^24} | " + " | ".join(f"{h:<10}" for h in heads) + " ")
    for key, name, fmt in metrics:
        lines.append("-" * width)
        pools = [("all", name)]
        if not abbreviated:
            pools += [
                ("large_pool", "      from large pool"),
                ("small_pool", "      from small pool"),
            ]
        pref = None
        for pool, label in pools:
            vals = [stats.get(f"{key}.{pool}.{c}", 0) for c in cols]
            pref = pref or vals
            cells = " | ".join(fmt(v, p) for v, p in zip(vals, pref, strict=True))
            lines.append(f" {label:<24} | {cells} ")
    for key, name in (
        ("oversize_allocations", "Oversize allocations"),
        ("oversize_segments", "Oversize device segments"),
    ):
        lines.append("-" * width)
        vals = [stats.get(f"{key}.{c}", 0) for c in cols]
        lines.append(f" {name:<24} | " + " | ".join(_format_count(v, v) for v in vals) + " ")
    lines.append("=" * width)
    return "|" + "|\n|".join(line.ljust(width) for line in lines) + "|\n"
