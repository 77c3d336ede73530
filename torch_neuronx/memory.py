"""Device memory: the caching allocator's statistics and controls."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

from . import _C
from .device import _DeviceLike, _index


def _ready() -> bool:
    return _C._is_initialized()


def memory_stats(device: _DeviceLike = None) -> OrderedDict[str, Any]:
    """CUDA-style statistics ("allocated_bytes.all.current", ...) of one device."""
    idx = _index(device)
    if not _ready():
        return OrderedDict()
    return torch.accelerator.memory_stats(idx)


def memory_allocated(device: _DeviceLike = None) -> int:
    """Bytes of device memory occupied by tensors."""
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device: _DeviceLike = None) -> int:
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device: _DeviceLike = None) -> int:
    """Bytes held by the caching allocator (in use or cached)."""
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device: _DeviceLike = None) -> int:
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


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
    _C._init()
    return torch.accelerator.get_memory_info(idx)


def _fmt(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:7.2f} {unit}"
    return f"{n:7d} B  "


def memory_summary(device: _DeviceLike = None, abbreviated: bool = False) -> str:
    """A table of the allocator's statistics, in the spirit of CUDA's memory_summary."""
    idx = _index(device)
    stats = memory_stats(idx)
    rows = [
        ("Allocated memory", "allocated_bytes", True),
        ("Active memory", "active_bytes", True),
        ("Requested memory", "requested_bytes", True),
        ("Reserved memory", "reserved_bytes", True),
        ("Allocations", "allocation", False),
        ("Active allocs", "active", False),
        ("Device reserved segments", "segment", False),
    ]
    pools = ["all"] if abbreviated else ["all", "large_pool", "small_pool"]
    width = 75
    lines = ["=" * width, f" neuron:{idx} memory summary".ljust(width), "-" * width]
    lines.append(f"{'Metric':<28}|{'Cur Usage':>11} |{'Peak Usage':>11} |{'Tot Alloc':>11} |")
    lines.append("-" * width)
    for title, key, is_bytes in rows:
        for pool in pools:
            label = title if pool == "all" else f"  from {pool.replace('_', ' ')}"
            vals = [stats.get(f"{key}.{pool}.{k}", 0) for k in ("current", "peak", "allocated")]
            cells = [_fmt(v) if is_bytes else f"{v:7d}    " for v in vals]
            lines.append(f"{label:<28}|" + "|".join(f"{c:>11} " for c in cells) + "|")
        lines.append("-" * width)
    lines.append(
        f"{'Alloc retries':<28}| {stats.get('num_alloc_retries', 0):<10}"
        f"{'OOMs':>8} {stats.get('num_ooms', 0):<10}"
    )
    lines.append("=" * width)
    return "\n".join(lines)
