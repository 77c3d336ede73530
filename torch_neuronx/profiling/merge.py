"""Per-rank Chrome traces merged into one trace (Perfetto, chrome://tracing).

Each rank of a distributed job exports its own trace (``prof.export_chrome_trace``);
:func:`merge_traces` puts them side by side on one time axis:

* **pids**: every process id ``pid`` of rank ``R`` becomes ``R * 10_000_000 + pid``
  (``PID_STRIDE``). Host processes keep their OS pid (Linux pids stay below 2**22,
  so they never reach the stride) and device tracks (pid = device index) stay
  distinct per rank; the rank is readable in the merged pid
  (``30021757`` = rank 3, pid 21757). Ranks up to 213 keep pids within 32 bits.
  Non-numeric pids (Kineto's ``"Spans"``) become ``"rank R <pid>"``.
* **names**: ``process_name`` metadata gets the prefix ``"rank R "``; every rank's
  ``process_sort_index`` is offset the same way as its pids, so Perfetto lists the
  ranks in order.
* **time**: each trace's ``ts`` are relative to its ``baseTimeNanoseconds``; they are
  moved to the smallest base of the inputs (all ranks' clocks are the hosts' unix
  clocks, so events that happened together line up).
* **flows** (host op -> device item arrows): their ids are made unique per rank
  (``R * 2**40 + id``).
* **rank**: from the trace's ``distributedInfo.rank`` (torch.profiler writes it
  when torch.distributed is initialized), else the first number after ``rank`` in
  the file name (``trace_rank3.json``), else the file's position in ``paths``.

The merged trace's top level has ``traceEvents``, ``baseTimeNanoseconds``,
``displayTimeUnit`` and ``distributedInfo`` as a list with one entry per input
(``rank``, ``path`` and what the input's ``distributedInfo`` had).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PID_STRIDE = 10_000_000
FLOW_ID_STRIDE = 1 << 40

_RANK_IN_NAME = re.compile(r"rank[_\-.]?(\d+)", re.IGNORECASE)


def _open(path: Path, mode: str):
    if path.suffix == ".gz":
        return gzip.open(path, mode + "t", encoding="utf-8")
    return open(path, mode, encoding="utf-8")


def load_trace(path: str | os.PathLike) -> dict[str, Any]:
    """A Chrome JSON trace (``.json`` or ``.json.gz``) as a dict with ``traceEvents``."""
    path = Path(path)
    with _open(path, "r") as f:
        data = json.load(f)
    if isinstance(data, list):  # the bare-array form of the format
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ValueError(f"{path}: not a Chrome trace (no traceEvents list)")
    return data


def trace_rank(trace: dict[str, Any], path: str | os.PathLike, position: int) -> int:
    """The rank a trace belongs to (see the module docstring for the order of sources)."""
    info = trace.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"]
    m = _RANK_IN_NAME.search(Path(path).name)
    if m:
        return int(m.group(1))
    return position


def _map_pid(pid: Any, rank: int) -> Any:
    if isinstance(pid, bool):
        return pid
    if isinstance(pid, int):
        return rank * PID_STRIDE + pid
    if isinstance(pid, str) and pid.lstrip("-").isdigit():
        return rank * PID_STRIDE + int(pid)
    return f"rank {rank} {pid}"


def _map_flow_id(value: Any, rank: int) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return rank * FLOW_ID_STRIDE + value
    if isinstance(value, str):
        return f"rank{rank}:{value}"
    return value


def _rebase(event: dict[str, Any], shift_us: float) -> None:
    if shift_us and isinstance(event.get("ts"), (int, float)):
        event["ts"] = round(event["ts"] + shift_us, 3)


def merge_traces(
    paths: Sequence[str | os.PathLike],
    out_path: str | os.PathLike,
    ranks: Sequence[int] | None = None,
) -> Path:
    """Merges per-rank Chrome traces into out_path (``.json``, or ``.json.gz``:
    compressed) and returns out_path.

    ranks: the rank of each path, overriding what the traces and file names say.
    Two inputs of the same rank are an error (their tracks would be merged).
    """
    if not paths:
        raise ValueError("merge_traces: no traces given")
    if ranks is not None and len(ranks) != len(paths):
        raise ValueError(f"merge_traces: {len(paths)} paths but {len(ranks)} ranks")
    traces = [load_trace(p) for p in paths]
    rank_of = [
        ranks[i] if ranks is not None else trace_rank(t, p, i)
        for i, (t, p) in enumerate(zip(traces, paths, strict=True))
    ]
    seen: dict[int, str] = {}
    for r, p in zip(rank_of, paths, strict=True):
        if r in seen:
            raise ValueError(f"merge_traces: {seen[r]} and {p} are both rank {r}")
        seen[r] = str(p)

    bases = [int(t.get("baseTimeNanoseconds", 0)) for t in traces]
    base = min(bases)
    merged: list[dict[str, Any]] = []
    infos = []
    for trace, path, rank, own_base in zip(traces, paths, rank_of, bases, strict=True):
        shift_us = (own_base - base) / 1e3
        info = {"rank": rank, "path": str(path)}
        if isinstance(trace.get("distributedInfo"), dict):
            info.update({k: v for k, v in trace["distributedInfo"].items() if k != "rank"})
        infos.append(info)
        for ev in trace["traceEvents"]:
            if not isinstance(ev, dict):
                continue
            ev = dict(ev)
            if "pid" in ev:
                ev["pid"] = _map_pid(ev["pid"], rank)
            _rebase(ev, shift_us)
            ph = ev.get("ph")
            if ph in ("s", "t", "f") and "id" in ev:
                ev["id"] = _map_flow_id(ev["id"], rank)
            if ph == "M":
                args = dict(ev.get("args") or {})
                if ev.get("name") == "process_name":
                    args["name"] = f"rank {rank} {args.get('name', '')}".rstrip()
                elif ev.get("name") == "process_sort_index" and isinstance(
                    args.get("sort_index"), int
                ):
                    args["sort_index"] = rank * PID_STRIDE + args["sort_index"]
                ev["args"] = args
            merged.append(ev)
        # A process without a process_name (some exporters omit it) still shows its rank.
        named = {
            ev["pid"] for ev in merged if ev.get("ph") == "M" and ev.get("name") == "process_name"
        }
        for pid in sorted(
            {_map_pid(e["pid"], rank) for e in trace["traceEvents"] if "pid" in e} - named,
            key=str,
        ):
            merged.append(
                {"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                 "args": {"name": f"rank {rank} pid {pid}"}}
            )  # fmt: skip

    out = {
        "schemaVersion": 1,
        "displayTimeUnit": traces[0].get("displayTimeUnit", "ms"),
        "baseTimeNanoseconds": base,
        "distributedInfo": sorted(infos, key=lambda i: i["rank"]),
        "traceEvents": merged,
    }
    out_path = Path(out_path)
    try:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        with _open(out_path, "w") as f:
            json.dump(out, f)
    except OSError as e:
        raise OSError(f"cannot write the merged trace {out_path}: {e}") from e
    return out_path


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m torch_neuronx.profiling.merge OUT IN...``"""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="merged trace (.json or .json.gz)")
    p.add_argument("traces", nargs="+", help="per-rank Chrome traces")
    args = p.parse_args(argv)
    print(merge_traces(args.traces, args.out))


if __name__ == "__main__":
    main()
