"""Writes a finished profile in the vendor's layout, in open formats.

    <profile_output_dir>/<hostname>_pid_<pid>/[<YYYYmmdd_HHMMSS_mmm>/]
        trace.json | trace_rank<r>.json   Chrome/Perfetto trace (torch.profiler's)
        *.parquet                         tables (torch_neuronx.profiling.tables)
        host_counters.parquet             CPU_UTIL / HOST_MEMORY samples (rows)
        host_counters.json                the same as Chrome counter events
        index.json                        what is here, and how it was captured

The timestamp directory is the vendor's torch.profiler layout (one per
profile); environment-variable capture writes directly into the
``<hostname>_pid_<pid>`` directory, as the vendor's runtime does. No
.ntff/.neff files: the simulated NeuronCore has no hardware trace or NEFF.
"""

from __future__ import annotations

import datetime
import importlib
import importlib.util
import json
import os
import re
import socket
import tempfile
import time
import warnings
import weakref

import torch.distributed as dist

from .. import _C
from .config import ProfileMode, Settings

_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_ESTIMATE_TID_BASE = 1000  # the estimated-Trainium track of stream s is tid s + 1000


class NRTProfilerError(Exception):
    """A Neuron profile could not be captured or written."""


class ProfileOutputError(NRTProfilerError, OSError):
    """The profile's output directory cannot be written. The profile itself is
    not lost: prof.key_averages(), prof.export_chrome_trace(other_path) work."""


def rank_info() -> tuple[int | None, int | None]:
    """(rank, world size): torch.distributed's when it is initialized, else
    torchrun's RANK / WORLD_SIZE (at exit the process group is usually gone
    already), else (None, None)."""
    try:
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:  # a broken group must not stop the export
        pass
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is not None and rank.isdigit():
        return int(rank), int(world) if world and world.isdigit() else None
    return None, None


def _session_dir(settings: Settings, start_ns: int) -> str:
    base = os.path.join(
        os.path.abspath(settings.profile_output_dir), f"{socket.gethostname()}_pid_{os.getpid()}"
    )
    if not settings.session_subdir:
        return base
    when = datetime.datetime.fromtimestamp(start_ns / 1e9)
    stamp = when.strftime("%Y%m%d_%H%M%S") + f"_{when.microsecond // 1000:03d}"
    path, n = os.path.join(base, stamp), 1
    while os.path.exists(path):  # two profiles within the same millisecond
        path, n = os.path.join(base, f"{stamp}_{n}"), n + 1
    return path


def _make_writable_dir(path: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
        # makedirs succeeds on an existing read-only directory: try a file.
        fd, probe = tempfile.mkstemp(dir=path, prefix=".probe")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ProfileOutputError(
            e.errno,
            f"cannot write the Neuron profile to {path!r} ({e.strerror or e}); the profile is "
            "still in memory: prof.key_averages() and prof.export_chrome_trace(<another path>) "
            "work, or set profile_output_dir to a writable directory",
            path,
        ) from e


def _write_json(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


# --- the Chrome trace ---------------------------------------------------------------------------


def _device_pids(events) -> dict:
    """pid -> device index of the device processes: the processes of the device
    items, each of which carries its device's index (the Kineto plugin's "device"
    metadata)."""
    pids = {}
    for e in events:
        if e.get("ph") == "X":
            device = e.get("args", {}).get("device")
            if isinstance(device, int):
                pids.setdefault(e["pid"], device)
    return pids


def _filter_trace(trace: dict, settings: Settings, allowed: set[int] | None, report: dict) -> None:
    """Leaves out what the settings exclude, in place: device processes not
    allowed, device events of other categories, events past the per-core cap,
    host runtime events without RUNTIME; flow arrows lose both ends with
    their target. report collects per-core truncation counts."""
    events = trace.get("traceEvents", [])
    dev_pids = _device_pids(events)
    drop_pids = {pid for pid, dev in dev_pids.items() if allowed is not None and dev not in allowed}
    types = set(settings.event_types) if settings.event_types else None
    cap = settings.max_events_per_nc
    keep_runtime = ProfileMode.RUNTIME in settings.modes
    device_off = ProfileMode.DEVICE not in settings.modes

    dropped_slices: set = set()  # (pid, tid, ts) of device slices left out
    kept_per_track: dict = {}
    order = sorted(
        (i for i, e in enumerate(events) if e.get("ph") == "X" and e.get("pid") in dev_pids),
        key=lambda i: events[i].get("ts", 0),
    )
    drop_index: set[int] = set()
    corr_all, corr_kept = set(), set()
    for i in order:
        e = events[i]
        pid, tid = e["pid"], e.get("tid")
        corr = e.get("args", {}).get("correlation")
        corr_all.add(corr)
        reason = None
        if pid in drop_pids:
            reason = "core"
        elif types is not None and e.get("args", {}).get("category") not in types:
            reason = "type"
        elif cap is not None:
            n = kept_per_track.get((pid, tid), 0)
            if n >= cap:
                reason = "cap"
                if not (isinstance(tid, int) and tid >= _ESTIMATE_TID_BASE):
                    report[dev_pids[pid]] = report.get(dev_pids[pid], 0) + 1
            else:
                kept_per_track[(pid, tid)] = n + 1
        if reason:
            drop_index.add(i)
            dropped_slices.add((pid, tid, e.get("ts")))
        else:
            corr_kept.add(corr)
    # The host queue event of an item left out goes with it (not when the
    # whole device timeline is off: RUNTIME alone keeps the host side).
    drop_corr = set() if device_off else corr_all - corr_kept - {None}

    dropped_flows = set()
    for e in events:
        if e.get("ph") == "f" and (
            e.get("pid") in drop_pids or (e.get("pid"), e.get("tid"), e.get("ts")) in dropped_slices
        ):
            dropped_flows.add(e.get("id"))

    def keep(i: int, e: dict) -> bool:
        if i in drop_index or e.get("pid") in drop_pids:
            return False
        if (
            e.get("ph") in ("s", "f", "t")
            and e.get("cat") == "ac2g"
            and e.get("id") in dropped_flows
        ):
            return False
        if e.get("cat") == "privateuse1_runtime":
            if not keep_runtime:
                return False
            if e.get("args", {}).get("correlation") in drop_corr:
                return False
        return True

    trace["traceEvents"] = [e for i, e in enumerate(events) if keep(i, e)]


def _write_trace(prof, directory: str, name: str, settings: Settings, allowed, report) -> dict:
    path = os.path.join(directory, name)
    needs_filter = (
        allowed is not None
        or settings.event_types is not None
        or settings.max_events_per_nc is not None
        or ProfileMode.RUNTIME not in settings.modes
    )
    # Kineto saves a profile's trace once only ("Trace is already saved"):
    # the unfiltered file is kept, and the user's own export_chrome_trace
    # afterwards copies it (hooks.py). Unfiltered, that is trace.json itself;
    # filtered, a temporary file removed with the profile.
    if needs_filter:
        fd, raw = tempfile.mkstemp(prefix="torch_neuronx_trace_", suffix=".json")
        os.close(fd)
        weakref.finalize(prof.profiler, _unlink_quietly, raw)
    else:
        raw = path
    prof.export_chrome_trace(raw)
    prof.profiler._neuron_saved_trace = raw
    info = {"base_ns": 0}
    if needs_filter:
        with open(raw) as f:
            trace = json.load(f)
        _filter_trace(trace, settings, allowed, report)
        info["base_ns"] = int(trace.get("baseTimeNanoseconds", 0) or 0)
        _write_json(path, trace)
    else:
        # Only the time base is needed (to align the host counters): it is in
        # the file's first lines, no need to load a large trace.
        with open(path) as f:
            head = f.read(1 << 16)
        m = re.search(r'"baseTimeNanoseconds"\s*:\s*(\d+)', head)
        info["base_ns"] = int(m[1]) if m else 0
    return info


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# --- tables ---------------------------------------------------------------------------------------


def _filter_tables(paths: list[str], settings: Settings, allowed, report) -> None:
    """Device rows of cores left out, of other categories, or past the per-core
    cap (the first N by start time kept) are removed from the tables that
    have a ``device`` column."""
    if allowed is None and settings.event_types is None and settings.max_events_per_nc is None:
        return
    # optional: pyarrow (the tables are Parquet files only when it is installed)
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = set(settings.event_types) if settings.event_types else None
    cap = settings.max_events_per_nc
    for path in paths:
        table = pq.read_table(path)
        if "device" not in table.column_names:
            continue
        devices = table.column("device").to_pylist()
        keep = [allowed is None or d in allowed for d in devices]
        if types is not None and "category" in table.column_names:
            cats = table.column("category").to_pylist()
            keep = [k and c in types for k, c in zip(keep, cats, strict=True)]
        per_item = "start_ns" in table.column_names and (
            "seq" in table.column_names or "name" in table.column_names
        )
        if cap is not None and per_item:
            starts = table.column("start_ns").to_pylist()
            counts: dict = {}
            dropped: dict = {}
            for i in sorted(range(len(devices)), key=lambda i: (starts[i] is None, starts[i])):
                if not keep[i]:
                    continue
                n = counts.get(devices[i], 0)
                if n >= cap:
                    keep[i] = False
                    dropped[devices[i]] = dropped.get(devices[i], 0) + 1
                else:
                    counts[devices[i]] = n + 1
            for dev, n in dropped.items():
                report[dev] = max(report.get(dev, 0), n)
        if not all(keep):
            pq.write_table(table.filter(pa.array(keep, type=pa.bool_())), path)


def _write_tables(prof, directory: str, settings: Settings, allowed, report, notes) -> None:
    if importlib.util.find_spec(f"{__package__}.tables") is None:
        notes.append("no tables: torch_neuronx.profiling.tables is not installed")
        return
    before = set(os.listdir(directory))
    try:
        tables = importlib.import_module(f"{__package__}.tables")
        tables.export_parquet(prof, directory)
        new = sorted(set(os.listdir(directory)) - before)
        _filter_tables(
            [os.path.join(directory, n) for n in new if n.endswith(".parquet")],
            settings,
            allowed,
            report,
        )
    except Exception as e:  # the trace and the rest are still worth writing
        warnings.warn(
            f"Neuron profile: the tables were not written: {e}", UserWarning, stacklevel=4
        )
        notes.append(f"no tables: {type(e).__name__}: {e}")


# --- host counters --------------------------------------------------------------------------------


def _write_host_counters(sampler, directory: str, base_ns: int) -> list[str]:
    rows = sampler.samples
    written = []
    try:
        # optional: pyarrow (without it, JSON below)
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table(
            {
                "timestamp_ns": pa.array([r[0] for r in rows], pa.int64()),
                "kind": pa.array([r[1] for r in rows], pa.string()),
                "name": pa.array([r[2] for r in rows], pa.string()),
                "value": pa.array([r[3] for r in rows], pa.float64()),
            }
        )
        pq.write_table(table, os.path.join(directory, "host_counters.parquet"))
        written.append("host_counters.parquet")
    except ImportError:
        _write_json(
            os.path.join(directory, "host_counters_table.json"),
            {
                "columns": ["timestamp_ns", "kind", "name", "value"],
                "rows": [list(r) for r in rows],
            },
        )
        written.append("host_counters_table.json")

    # Chrome counter events: one per sample time and kind, on this process, in
    # the trace's time base so both files load side by side in Perfetto.
    titles = {"cpu_util": "Host CPU utilization (%)", "host_memory": "Host memory (bytes)"}
    grouped: dict = {}
    for ts, kind, name, value in rows:
        grouped.setdefault((ts, kind), {})[name] = value
    pid = os.getpid()
    events = [
        {
            "ph": "C",
            "name": titles[kind],
            "cat": kind,
            "pid": pid,
            "tid": 0,
            "ts": (ts - base_ns) / 1000.0,
            "args": args,
        }
        for (ts, kind), args in sorted(grouped.items())
    ]
    _write_json(
        os.path.join(directory, "host_counters.json"),
        {
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": base_ns,
            "traceEvents": events,
        },
    )
    written.append("host_counters.json")
    return written


# --- the whole profile ----------------------------------------------------------------------------


def _target() -> dict | None:
    try:
        return dict(_C._profiler_target())
    except Exception:
        return None


def export_profile(prof, settings: Settings, *, state, source: str) -> str:
    """Writes `prof` (a stopped torch.profiler profile) and returns the
    directory. state: the session's host sampler and start time."""
    directory = _session_dir(settings, state.start_ns)
    _make_writable_dir(directory)

    if ProfileMode.DEVICE not in settings.modes:
        allowed: set[int] | None = set()  # no device timeline at all
    elif settings.capture_enabled_for_nc is not None:
        allowed = set(settings.capture_enabled_for_nc)
    else:
        allowed = None

    rank, world = rank_info()
    if rank is None:
        rank, world = state.rank, state.world_size
    trace_name = "trace.json" if rank is None else f"trace_rank{rank}.json"
    notes: list[str] = []
    truncated: dict = {}

    trace_info = _write_trace(prof, directory, trace_name, settings, allowed, truncated)
    _write_tables(prof, directory, settings, allowed, truncated, notes)
    if state.sampler is not None and state.sampler.enabled:
        _write_host_counters(state.sampler, directory, trace_info["base_ns"])
    if truncated:
        warnings.warn(
            f"Neuron profile: max_events_per_nc={settings.max_events_per_nc} left out device "
            "events on NeuronCore(s) "
            + ", ".join(f"{dev} ({n} events)" for dev, n in sorted(truncated.items()))
            + "; the first ones are kept",
            UserWarning,
            stacklevel=3,
        )
    if ProfileMode.DEVICE in settings.modes and not state.device_activity:
        notes.append("DEVICE mode without ProfilerActivity.PrivateUse1: no device timeline")
    if ProfileMode.RUNTIME in settings.modes and not state.cpu_activity:
        notes.append("RUNTIME mode without ProfilerActivity.CPU: no host-side runtime events")

    files = []
    for name in sorted(os.listdir(directory)):
        full = os.path.join(directory, name)
        if name == "index.json" or name.startswith(".") or not os.path.isfile(full):
            continue
        kind = (
            "chrome_trace"
            if name == trace_name
            else "chrome_counters"
            if name == "host_counters.json"
            else "table"
            if name.endswith(".parquet") or name == "host_counters_table.json"
            else "other"
        )
        files.append({"path": name, "kind": kind, "bytes": os.path.getsize(full)})
    index = {
        "format": "torch_neuronx.profile",
        "version": 1,
        "source": source,
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "rank": rank,
        "world_size": world,
        "start_unix_ns": state.start_ns,
        "end_unix_ns": state.end_ns or time.time_ns(),
        "modes": [m.name for m in settings.modes],
        "target": _target(),
        "files": files,
        "filters": {
            "capture_enabled_for_nc": None
            if settings.capture_enabled_for_nc is None
            else list(settings.capture_enabled_for_nc),
            "event_types": None if settings.event_types is None else list(settings.event_types),
            "max_events_per_nc": settings.max_events_per_nc,
            # Applied to the Chrome trace (rewritten after torch exports it)
            # and to the tables' rows that have a device column.
            "applied_to": ["trace", "tables"],
            "truncated_events_per_nc": {str(k): v for k, v in sorted(truncated.items())},
        },
        "host_counters": None
        if state.sampler is None or not state.sampler.enabled
        else {
            "source": state.sampler.source,
            "interval_ms": state.sampler.interval_s * 1000.0,
            "samples": len({r[0] for r in state.sampler.samples}),
        },
        "notes": notes,
    }
    _write_json(os.path.join(directory, "index.json"), index)
    return directory
