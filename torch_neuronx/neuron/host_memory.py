"""Pinned host memory: statistics of the caching pinned allocator.

The same functions and keys as ``torch.cuda.host_memory_stats`` and friends.
``torch.accelerator.empty_host_cache()`` returns the cached blocks to the system.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from .. import _C


def host_memory_stats_as_nested_dict() -> dict[str, Any]:
    """The statistics of :func:`host_memory_stats`, as nested dictionaries."""
    return _C._host_memory_stats()


def host_memory_stats() -> OrderedDict[str, Any]:
    """Statistics of the pinned host allocator, flattened (``"allocations.current"``, ...).

    ``allocations`` / ``allocated_bytes``: blocks the allocator owns (in use or cached);
    ``active_requests`` / ``active_bytes``: blocks handed out and not yet reusable (a
    freed block stays active until the asynchronous copies that used it have run);
    ``num_host_alloc`` / ``num_host_free``: blocks obtained from and returned to the
    system; ``host_alloc_time`` / ``host_free_time``: time spent doing so, in µs.
    Sizes are rounded up to powers of two, as CUDA's allocator does.
    """
    out: list[tuple[str, Any]] = []

    def walk(prefix: str, obj: Any) -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            out.append((prefix, obj))

    walk("", host_memory_stats_as_nested_dict())
    return OrderedDict(sorted(out))


def reset_peak_host_memory_stats() -> None:
    """Resets the ``peak`` values of :func:`host_memory_stats`."""
    _C._host_reset_peak_stats()


def reset_accumulated_host_memory_stats() -> None:
    """Resets the ``allocated`` / ``freed`` totals of :func:`host_memory_stats`."""
    _C._host_reset_accumulated_stats()
