"""A finished ``torch.profiler.profile`` as tables: pandas DataFrames and Parquet files.

Four tables, all from one profile ``prof``:

``ops``
    One row per host event of ``prof.events()`` (operators, ``record_function`` ranges,
    autograd nodes; the runtime's ``neuron_queue_item`` launch markers are left out,
    their time is the device items' ``queued_ns``). Times are microseconds from the
    start of the profile, the base ``prof.events()`` uses.
``device_items``
    One row per device work item the runtime traced (``torch_neuronx._C._profiler_items()``),
    including the children of an item (a program's steps, an NKI kernel's engines, an
    adaptive-eager item's ops and fused steps), with its measured duration, its
    estimated Trainium time and the host op that queued it.
``memory_events``
    The profiler's allocation records (``profile_memory=True``): one row per
    allocation (``bytes`` > 0) or free (``bytes`` < 0).
``collectives``
    The device items of category ``"collective"``, their ``detail`` string
    (``"group=0;size=4096;..."``) split into one column per key.

The device items of a session are kept by the extension for the last finished
session only; :func:`device_items` checks they are ``prof``'s (same device events as
``prof.events()``) and otherwise rebuilds them from ``prof``'s own device events, with
a warning, since those lack the children and part of the detail.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from torch_neuronx import _C

# Columns of _C._profiler_items(), in the extension's order.
ITEM_FIELDS = (
    "device",
    "stream",
    "seq",
    "name",
    "category",
    "start_ns",
    "end_ns",
    "queued_ns",
    "host_thread",
    "correlation",
    "skipped",
    "flops",
    "bytes",
    "engine",
    "element_bytes",
    "adaptive_sequence",
    "estimate_ns",
    "estimate_compute_ns",
    "estimate_dma_ns",
    "estimate_latency_ns",
    "estimate_overlap_ns",
    "estimate_start_ns",
    "parent",
    "fused_into",
    "detail",
)

# An estimate's parts (estimate = compute + dma + latency - overlap): the
# columns estimate_<part>_ns, NaN when the item has no estimate or its estimate
# has no parts (an NKI kernel's cost model gives a total).
_PARTS = ("compute", "dma", "latency", "overlap")

# Host events that are the runtime's launch markers, not operators.
_RUNTIME_EVENTS = frozenset({"neuron_queue_item"})

# Where results are cached on the profile object: the extension keeps only the
# last session's items, so the first look at a profile pins them to it.
_CACHE_ATTR = "_torch_neuronx_device_items"

# A device event's start (us, from prof.events()) and an item's start agree to
# float rounding of the same nanosecond value.
_START_TOLERANCE_US = 0.01


def parse_detail(detail: str | None) -> dict[str, Any]:
    """``"k=v;k=v"`` as a dict; values that read as integers or floats become numbers.

    Keys without ``=`` and empty parts are ignored; a repeated key keeps its last
    value.
    """
    out: dict[str, Any] = {}
    for part in (detail or "").split(";"):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not key:
            continue
        out[key] = _number(value.strip())
    return out


def _number(s: str) -> Any:
    for conv in (int, float):
        try:
            return conv(s)
        except ValueError:
            pass
    return s


def _is_device_event(ev) -> bool:
    # The device type is PrivateUse1, shown under its registered name.
    return getattr(ev.device_type, "name", str(ev.device_type)) not in ("CPU", "CUDA")


def _host_events(prof) -> list:
    return [
        ev for ev in prof.events() if not _is_device_event(ev) and ev.name not in _RUNTIME_EVENTS
    ]


def _trace_start_ns(prof) -> int | None:
    try:
        return int(prof.profiler.kineto_results.trace_start_ns())
    except (AttributeError, RuntimeError):
        return None


def _device_events(prof) -> list:
    return [ev for ev in prof.events() if _is_device_event(ev)]


def _items_match(items: list[dict], dev_events: list, start_ns: int | None) -> bool:
    """Whether items are the session behind dev_events.

    torch.profiler shows every top-level item except engines (children and
    engines are annotations it leaves out), with the item's name and start and
    the host op's correlation id as the event id; of an adaptive-eager item
    (``adaptive_sequence``), the ops it ran instead (the item is their range, and
    so is a fused step among them, category ``"fused"``). An
    item queued without a correlation id (no host op recorded it, e.g. during a
    schedule's warmup) gets an arbitrary event id, so those are matched by name and
    start only.
    """

    def shown_item(it: dict) -> bool:
        if it["category"] in ("engine", "fused"):
            return False
        if it["parent"] < 0:
            return not it.get("adaptive_sequence", 0)
        return bool(items[it["parent"]].get("adaptive_sequence", 0))

    shown = [it for it in items if shown_item(it)]
    if len(shown) != len(dev_events):
        return False
    if sorted(it["name"] for it in shown) != sorted(ev.name for ev in dev_events):
        return False
    event_keys = Counter((ev.name, int(ev.id)) for ev in dev_events)
    item_keys = Counter((it["name"], int(it["correlation"])) for it in shown if it["correlation"])
    if item_keys - event_keys:
        return False
    if start_ns is None or not shown:
        return True
    starts_items = sorted((it["start_ns"] - start_ns) / 1e3 for it in shown)
    starts_events = sorted(ev.time_range.start for ev in dev_events)
    return all(
        abs(a - b) <= _START_TOLERANCE_US for a, b in zip(starts_items, starts_events, strict=True)
    )


def _event_metadata(ev) -> dict[str, Any]:
    """A device event's Kineto metadata (only recorded with expose_kineto_event_metadata)."""
    raw = getattr(ev, "event_metadata", None)
    if raw is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            raw = getattr(ev, "metadata_json", "")
    if isinstance(raw, dict):
        return raw
    if not raw:
        return {}
    try:
        return json.loads("{" + raw + "}")
    except json.JSONDecodeError:
        return {}


def _chrome_device_args(prof) -> dict[tuple[int, str], list[dict]]:
    """Device events' args from the profile's Chrome trace, by (correlation, name), in
    start order.

    The fallback when Kineto metadata was not exposed on the events: the trace
    export always carries it.
    """
    fd, path = tempfile.mkstemp(suffix=".json", prefix="neuronx_prof_")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    except (OSError, RuntimeError, ValueError):
        return {}
    finally:
        Path(path).unlink(missing_ok=True)
    out: dict[tuple[int, str], list[dict]] = {}
    events = [
        e
        for e in trace.get("traceEvents", [])
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy")
    ]
    for e in sorted(events, key=lambda e: e.get("ts", 0)):
        args = e.get("args", {})
        key = (int(args.get("External id", args.get("correlation", 0))), e.get("name"))
        out.setdefault(key, []).append(args)
    return out


def _rebuild_items(prof, dev_events: list, start_ns: int | None) -> list[dict]:
    """Device items from prof's own device events (no children, no queue times)."""
    base = start_ns or 0
    metas = [_event_metadata(ev) for ev in dev_events]
    chrome = None
    if dev_events and not any(metas):
        chrome = _chrome_device_args(prof)
    estimate_key = None
    items = []
    order = sorted(range(len(dev_events)), key=lambda i: dev_events[i].time_range.start)
    for i in order:
        ev, meta = dev_events[i], metas[i]
        if not meta and chrome:
            same = chrome.get((int(ev.id), ev.name))
            meta = same.pop(0) if same else {}
        if estimate_key is None:
            estimate_key = next((k for k in meta if k.startswith("estimated ")), None)
        known = {
            "stream",
            "seq",
            "category",
            "flops",
            "bytes",
            "engine",
            "element_bytes",
            "adaptive_sequence",
            "correlation",
            "skipped",
        }
        detail = ";".join(
            f"{k}={v}"
            for k, v in meta.items()
            if k not in known
            and not k.startswith("estimated ")
            and not k.startswith("estimate ")
            and k != "External id"
        )
        est_us = meta.get(estimate_key) if estimate_key else None
        parts = {
            f"estimate_{part}_ns": (
                float(meta[f"estimate {part} us"]) * 1e3
                if f"estimate {part} us" in meta and est_us is not None
                else float("nan")
            )
            for part in _PARTS
        }
        start = base + round(ev.time_range.start * 1e3)
        items.append(
            {
                "device": int(ev.device_index),
                "stream": int(meta.get("stream", getattr(ev, "device_resource_id", 0))),
                "seq": int(meta.get("seq", 0)),
                "name": ev.name,
                "category": str(meta.get("category", "compute")),
                "start_ns": start,
                "end_ns": base + round(ev.time_range.end * 1e3),
                "queued_ns": start,
                "host_thread": 0,
                "correlation": int(ev.id),
                "skipped": bool(meta.get("skipped", 0)),
                "flops": float(meta.get("flops", 0.0)),
                "bytes": float(meta.get("bytes", 0.0)),
                "engine": str(meta.get("engine", "")),
                "element_bytes": int(meta.get("element_bytes", 4)),
                "adaptive_sequence": int(meta.get("adaptive_sequence", 0)),
                "estimate_ns": round(float(est_us) * 1e3) if est_us is not None else -1,
                **parts,
                "estimate_start_ns": start,
                "parent": -1,
                "fused_into": -1,
                "detail": detail,
            }
        )
    return items


def session_items(prof) -> list[dict]:
    """prof's device items as dicts (the fields of ``_C._profiler_items()``).

    The extension's list is the last finished session's; when it does not match
    prof's device events (another profile finished since, or none was kept), the
    items are rebuilt from prof's device events and a RuntimeWarning says so.
    The result is cached on prof.
    """
    cached = getattr(prof, _CACHE_ATTR, None)
    if cached is not None:
        return cached
    start_ns = _trace_start_ns(prof)
    dev_events = _device_events(prof)
    items = [dict(it) for it in _C._profiler_items()]
    if not _items_match(items, dev_events, start_ns):
        warnings.warn(
            "torch_neuronx.profiling: the runtime's device items are not this profile's "
            f"({len(items)} items, {len(dev_events)} device events in the profile; another "
            "profile finished since?); rebuilt from the profile's device events, without "
            "children (program steps, NKI engines) and queue times",
            RuntimeWarning,
            stacklevel=3,
        )
        items = _rebuild_items(prof, dev_events, start_ns)
    try:
        setattr(prof, _CACHE_ATTR, items)
    except AttributeError:
        pass
    return items


def _host_op_index(prof) -> tuple[dict[int, str], np.ndarray, np.ndarray, np.ndarray]:
    """Host events by correlation id (name), and their ids, starts and ends (us)."""
    names: dict[int, str] = {}
    ids, starts, ends = [], [], []
    for ev in _host_events(prof):
        names.setdefault(int(ev.id), ev.name)
        ids.append(int(ev.id))
        starts.append(ev.time_range.start)
        ends.append(ev.time_range.end)
    return names, np.array(ids, dtype=np.int64), np.array(starts), np.array(ends)


def device_items(prof) -> pd.DataFrame:
    """prof's device items, one row each.

    Columns: every field of ``_C._profiler_items()`` (times in unix ns, the clock
    torch.profiler's events use; ``estimate_ns`` -1 = no estimate;
    ``estimate_compute_ns``, ``estimate_dma_ns``, ``estimate_latency_ns``,
    ``estimate_overlap_ns`` its parts, estimate = compute + dma + latency - overlap,
    NaN without an estimate or when the estimate has no parts (an NKI kernel's cost
    model gives its total only); ``engine`` the
    engine its flops are estimated on, ``"tensor_bf16"``, ``"tensor_fp32"``,
    ``"vector"``, ``""`` without flops; ``element_bytes`` the size of the dtype its
    flops are in; ``adaptive_sequence`` for an adaptive-eager item the id of the
    repeated op sequence it runs, 0 for other items; ``parent`` the row of the item a
    child belongs to, -1 none; ``fused_into`` for an op that ran inside a fused step
    of an adaptive-eager item (category ``"fused"``, a child of the same item) the
    step's row, -1 otherwise: such an op's ``estimate_ns`` is what it would cost
    alone, the step's estimate is the cost, so it is not added up; its start and
    end are its share of the step's measured span, in proportion to its estimate
    alone) plus ``duration_ns`` (end - start,
    measured on the simulated device), ``start_us``, ``end_us``, ``queued_us``,
    ``estimate_start_us`` (the same times in us from the start of the profile, the
    base of ``ops``'s times), ``host_correlation`` (the ``ops`` row that queued the
    item: the one with the item's correlation id; for a child without one, its
    item's; for an id the profile has no host event for, the innermost host event
    running when the item was queued; -1 none) and ``host_op`` (that row's name).
    """
    items = session_items(prof)
    df = pd.DataFrame(items, columns=list(ITEM_FIELDS))
    df = df.astype(
        {
            "device": "int64",
            "stream": "int64",
            "seq": "int64",
            "start_ns": "int64",
            "end_ns": "int64",
            "queued_ns": "int64",
            "host_thread": "int64",
            "correlation": "int64",
            "skipped": "bool",
            "flops": "float64",
            "bytes": "float64",
            "engine": "string",
            "element_bytes": "int64",
            "adaptive_sequence": "uint64",
            "estimate_ns": "int64",
            "estimate_compute_ns": "float64",
            "estimate_dma_ns": "float64",
            "estimate_latency_ns": "float64",
            "estimate_overlap_ns": "float64",
            "estimate_start_ns": "int64",
            "parent": "int64",
            "fused_into": "int64",
            "name": "string",
            "category": "string",
            "detail": "string",
        }
    )
    df["duration_ns"] = df["end_ns"] - df["start_ns"]
    base = _trace_start_ns(prof) or 0
    df["start_us"] = (df["start_ns"] - base) / 1e3
    df["end_us"] = (df["end_ns"] - base) / 1e3
    df["queued_us"] = (df["queued_ns"] - base) / 1e3
    df["estimate_start_us"] = (df["estimate_start_ns"] - base) / 1e3
    names, ids, starts, ends = _host_op_index(prof)
    host = [int(c) if int(c) in names else -1 for c in df["correlation"]]
    parents = df["parent"].tolist()
    queued = df["queued_us"].tolist()
    for i, p in enumerate(parents):
        if host[i] >= 0:
            continue
        if p >= 0:
            host[i] = host[p]
        elif len(ids):
            # An id the profile has no host event for (an op torch.profiler did not
            # keep): the innermost host event running when the item was queued.
            inside = (starts <= queued[i]) & (ends >= queued[i])
            if inside.any():
                k = np.flatnonzero(inside)
                host[i] = int(ids[k[np.argmin(ends[k] - starts[k])]])
    df["host_correlation"] = np.array(host, dtype=np.int64)
    df["host_op"] = pd.array([names.get(h) for h in host], dtype="string")
    return df


def ops(prof) -> pd.DataFrame:
    """prof's host events, one row each.

    Columns: ``name``, ``start_us``, ``end_us``, ``duration_us``, ``thread`` (torch's
    thread id), ``correlation`` (``FunctionEvent.id``, what device items point at),
    ``parent`` (the enclosing event's correlation, -1 none), ``is_user_annotation``,
    ``self_cpu_time_us``, ``cpu_time_total_us``, ``device_time_total_us``,
    ``self_device_time_us`` (PyTorch's: measured device time of the items queued by
    the event (self) or by it and its children (total)), ``sequence_nr`` and
    ``fwd_thread`` (an autograd node's link to the forward op that made it),
    ``input_shapes`` and ``input_dtypes`` (as text, with ``record_shapes=True``) and
    ``flops`` (PyTorch's count, with ``with_flops=True``).
    """
    evs = _host_events(prof)
    # torch.profiler renames its ProfilerStep#N ranges "ProfilerStep*" (one row in
    # key_averages); the table keeps the step number.
    step_names = {}
    if any(ev.name == "ProfilerStep*" for ev in evs):
        try:
            for kev in prof.profiler.kineto_results.events():
                if kev.name().startswith("ProfilerStep#"):
                    step_names[int(kev.correlation_id())] = kev.name()
        except (AttributeError, RuntimeError):
            pass
    with_shapes = bool(getattr(prof, "record_shapes", False))
    with_flops = bool(getattr(prof, "with_flops", False))
    rows = []
    for ev in evs:
        parent = ev.cpu_parent
        row = {
            "name": step_names.get(int(ev.id), ev.name),
            "start_us": float(ev.time_range.start),
            "end_us": float(ev.time_range.end),
            "duration_us": float(ev.time_range.end - ev.time_range.start),
            "thread": int(ev.thread),
            "correlation": int(ev.id),
            "parent": int(parent.id) if parent is not None else -1,
            "is_user_annotation": bool(ev.is_user_annotation),
            "self_cpu_time_us": float(ev.self_cpu_time_total),
            "cpu_time_total_us": float(ev.cpu_time_total),
            "device_time_total_us": float(ev.device_time_total),
            "self_device_time_us": float(ev.self_device_time_total),
            "sequence_nr": int(ev.sequence_nr),
            "fwd_thread": int(ev.fwd_thread),
        }
        if with_shapes:
            row["input_shapes"] = str(ev.input_shapes)
            row["input_dtypes"] = str(ev.input_dtypes)
        if with_flops:
            row["flops"] = int(ev.flops or 0)
        rows.append(row)
    columns = [
        "name",
        "start_us",
        "end_us",
        "duration_us",
        "thread",
        "correlation",
        "parent",
        "is_user_annotation",
        "self_cpu_time_us",
        "cpu_time_total_us",
        "device_time_total_us",
        "self_device_time_us",
        "sequence_nr",
        "fwd_thread",
    ]
    if with_shapes:
        columns += ["input_shapes", "input_dtypes"]
    if with_flops:
        columns.append("flops")
    df = pd.DataFrame(rows, columns=columns)
    return df.astype({"name": "string"})


def memory_events(prof) -> pd.DataFrame:
    """prof's allocation records (``profile_memory=True``; empty otherwise).

    Columns: ``time_ns`` (unix ns), ``time_us`` (from the start of the profile),
    ``device_type`` (``"cpu"``, ``"neuron"``, ...), ``device_index`` (-1 for the
    CPU), ``bytes`` (+ allocation, - free), ``total_allocated`` and
    ``total_reserved`` (the allocator's totals after the event), ``ptr``, ``op``
    (the host op it happened in, if any).
    """
    columns = [
        "time_ns",
        "time_us",
        "device_type",
        "device_index",
        "bytes",
        "total_allocated",
        "total_reserved",
        "ptr",
        "op",
    ]
    rows = []
    try:
        tree = list(prof.profiler.kineto_results.experimental_event_tree())
    except (AttributeError, RuntimeError):
        tree = []
    base = _trace_start_ns(prof) or 0
    stack = tree
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        ef = node.extra_fields
        if type(ef).__name__ != "_ExtraFields_Allocation":
            continue
        dev = ef.device
        parent = node.parent
        rows.append(
            {
                "time_ns": int(node.start_time_ns),
                "time_us": (int(node.start_time_ns) - base) / 1e3,
                "device_type": dev.type,
                "device_index": -1 if dev.index is None else int(dev.index),
                "bytes": int(ef.alloc_size),
                "total_allocated": int(ef.total_allocated),
                "total_reserved": int(ef.total_reserved),
                "ptr": int(ef.ptr),
                "op": parent.name if parent is not None else None,
            }
        )
    df = pd.DataFrame(rows, columns=columns)
    df = df.sort_values("time_ns", kind="stable").reset_index(drop=True)
    return df.astype(
        {
            "time_ns": "int64",
            "time_us": "float64",
            "device_type": "string",
            "device_index": "int64",
            "bytes": "int64",
            "total_allocated": "int64",
            "total_reserved": "int64",
            "ptr": "int64",
            "op": "string",
        }
    )


def collectives_from_items(items: pd.DataFrame) -> pd.DataFrame:
    """The rows of a device-items table whose category is ``"collective"``, with
    their ``detail`` keys as columns (numbers where the value is one).

    Keys the runtime writes include ``group``, ``size``, ``peers``, ``seq`` and
    ``ranks``; every key found becomes a column (missing in a row: NA). A key that
    clashes with an item column is prefixed ``detail_``.
    """
    coll = items[items["category"] == "collective"].reset_index(drop=True)
    parsed = [parse_detail(d) for d in coll["detail"].fillna("")]
    keys: list[str] = []
    for p in parsed:
        for k in p:
            if k not in keys:
                keys.append(k)
    for k in keys:
        col = k if k not in coll.columns else f"detail_{k}"
        values = [p.get(k) for p in parsed]
        if all(isinstance(v, int) for v in values if v is not None):
            coll[col] = pd.array(values, dtype="Int64")
        elif all(isinstance(v, (int, float)) for v in values if v is not None):
            coll[col] = pd.array(values, dtype="Float64")
        else:
            coll[col] = pd.array([None if v is None else str(v) for v in values], dtype="string")
    return coll


def collectives(prof) -> pd.DataFrame:
    """prof's collective device items with their detail split into columns
    (see :func:`collectives_from_items`)."""
    return collectives_from_items(device_items(prof))


TABLES = ("ops", "device_items", "memory_events", "collectives")


def export_parquet(prof, directory: str | os.PathLike) -> dict[str, Path]:
    """Writes prof's tables as Parquet files in directory (created if missing).

    Returns ``{"ops": .../ops.parquet, "device_items": ..., "memory_events": ...,
    "collectives": ...}``. Read them back with ``pandas.read_parquet(path)``.

    Raises OSError naming the path when the directory cannot be created or a file
    cannot be written; prof is not changed and can be exported again.
    """
    # optional: pyarrow (not needed for the tables themselves, pandas DataFrames)
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OSError(
            e.errno, f"cannot create the profile table directory {directory}: {e.strerror}"
        ) from e
    items = device_items(prof)
    frames = {
        "ops": ops(prof),
        "device_items": items,
        "memory_events": memory_events(prof),
        "collectives": collectives_from_items(items),
    }
    paths: dict[str, Path] = {}
    for name, df in frames.items():
        path = directory / f"{name}.parquet"
        table = pa.Table.from_pandas(df, preserve_index=False)
        try:
            pq.write_table(table, str(path))
        except OSError as e:
            raise OSError(f"cannot write the profile table {path}: {e}") from e
        paths[name] = path
    return paths


_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")


def step_ranges(ops_df: pd.DataFrame) -> pd.DataFrame:
    """The ``ProfilerStep#N`` ranges a scheduled profile records: columns ``step``,
    ``start_us``, ``end_us`` (empty when the profile had no schedule)."""
    rows = []
    for name, s, e in zip(ops_df["name"], ops_df["start_us"], ops_df["end_us"], strict=True):
        m = _STEP_RE.match(str(name))
        if m:
            rows.append({"step": int(m.group(1)), "start_us": s, "end_us": e})
    return pd.DataFrame(rows, columns=["step", "start_us", "end_us"]).sort_values("step")


def select_steps(
    items: pd.DataFrame, ops_df: pd.DataFrame, steps=None
) -> tuple[pd.DataFrame, list[int]]:
    """The device items queued during the given ``ProfilerStep#N`` ranges.

    steps: step numbers, or None for every recorded step. Returns the selected
    rows (children follow their item; ``parent`` and ``fused_into`` renumbered to
    the selection) and
    the step numbers. Without step ranges (no schedule) and steps None: all items
    and ``[]``. A step that is not in the profile is a ValueError.

    With a schedule, the device items of the warmup steps are in the profile too
    (the device is traced from the warmup on) while their host ops are not: this
    keeps the recorded steps' work.
    """
    ranges = step_ranges(ops_df)
    if steps is None:
        if not len(ranges):
            return items, []
        steps = ranges["step"].tolist()
    wanted = [int(s) for s in steps]
    sel = ranges[ranges["step"].isin(wanted)]
    missing = set(wanted) - set(sel["step"].tolist())
    if missing:
        raise ValueError(
            f"steps {sorted(missing)} are not in the profile (recorded: {ranges['step'].tolist()})"
        )
    queued = items["queued_us"].to_numpy()
    keep = np.zeros(len(items), dtype=bool)
    for s, e in zip(sel["start_us"], sel["end_us"], strict=True):
        keep |= (queued >= s) & (queued <= e)
    parent = items["parent"].to_numpy()
    keep |= (parent >= 0) & keep[np.clip(parent, 0, None)]
    renumber = np.cumsum(keep) - 1
    out = items[keep].reset_index(drop=True)
    for col in ("parent", "fused_into"):
        if col not in out.columns:
            continue
        old = out[col].to_numpy()
        out[col] = np.where(old >= 0, renumber[np.clip(old, 0, None)], -1)
    return out, sorted(sel["step"].tolist())
