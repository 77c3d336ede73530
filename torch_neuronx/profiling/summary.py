"""Where the device time of a profile goes, and whether it is compute- or memory-bound.

Every device item the runtime traced while a ``torch.profiler.profile`` ran has a
measured time (on the simulated device) and, when the host described its work, an
estimated Trainium time (``estimate_ns``) with its parts (the device items'
``estimate_compute_ns``, ``estimate_dma_ns``, ``estimate_latency_ns``,
``estimate_overlap_ns``; docs/profiling.md "Estimated Trainium time")::

    estimate = compute + dma + latency - overlap
    compute  = the engines' time (matmuls in whole PE-array tiles, or the vector engines)
    dma      = the DMA queues' time (each transfer at its size's efficiency); for a
               collective, its bytes on the slowest link its ring crosses
    latency  = the fixed costs (an eager op's launch, the first DMA's start, a
               collective's steps)
    overlap  = compute and DMA at once (tiles pipelined)

with the model of ``torch_neuronx._C._profiler_target()`` (per device; trn2 by
default, ``TORCH_NEURONX_PROFILE_TARGET=trn1`` or ``_C._profiler_set_target``). The
summary takes each item's parts and calls it

* ``"compute"`` when ``compute`` is the largest part,
* ``"memory"`` when ``dma`` is,
* ``"latency"`` when the fixed cost is (the item is too small to matter on its own;
  many of them mean launch-bound work),
* ``"network"`` for a collective whose link time (its ``dma`` part) is larger than its
  latency part, else ``"latency"``.

An item whose estimate has no parts (an NKI kernel: its cost model gives a total) is
split as a roofline of its flops at its ``engine``'s peak and its bytes at the HBM
bandwidth, plus the model's per-item fixed cost.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

import torch_neuronx.profiling.tables as tables
from torch_neuronx import _C

BOUNDS = ("compute", "memory", "latency", "network")


def target() -> dict[str, Any]:
    """The Trainium model the estimates are made with (``_C._profiler_target()``)."""
    return dict(_C._profiler_target())


def item_costs(items: pd.DataFrame, model: dict[str, Any] | None = None) -> pd.DataFrame:
    """items (a :func:`tables.device_items` table) with each item's estimate split up.

    Added columns (ns unless said): ``compute_ns``, ``memory_ns`` (its DMA part),
    ``fixed_ns`` (its latency part), ``overlap_ns``, ``network_ns`` (a collective's
    DMA part, on the links; its ``memory_ns`` is 0): the estimate's parts, so
    ``compute + memory + network + fixed - overlap == estimate_ns`` (to rounding);
    for an estimate without parts, a roofline of the item's flops and bytes plus the
    model's fixed cost (``overlap_ns`` 0). ``bound``: the largest part's name
    (``""`` without an estimate or with a zero one); ``has_children``; ``leaf`` (a
    top-level item without children, or a child that is not an engine nor an op
    inside a fused step: what sums without counting work twice; a fused step of
    adaptive eager is one leaf, the ops it ran are not); ``attributed_ns`` (the
    share of the top-level estimates the item carries for its host op, see
    :func:`attributed_estimates`).
    """
    m = model or target()
    df = items.copy()
    n = len(df)
    flops = df["flops"].to_numpy(dtype=float)
    nbytes = df["bytes"].to_numpy(dtype=float)
    est = df["estimate_ns"].to_numpy(dtype=float)
    category = df["category"].astype(str).to_numpy()
    collective = category == "collective"

    def part(name: str) -> np.ndarray:
        col = f"estimate_{name}_ns"
        if col not in df.columns:
            return np.full(n, np.nan)
        return df[col].to_numpy(dtype=float)

    p_compute, p_dma, p_latency, p_overlap = (
        part("compute"),
        part("dma"),
        part("latency"),
        part("overlap"),
    )
    has_parts = (est >= 0) & ~np.isnan(p_compute)

    # Without parts: the roofline of the item's flops and bytes.
    fixed = float(m["fixed_ns"])
    peaks = {
        "tensor_bf16": float(m["tensor_bf16_flops_per_ns"]),
        "tensor_fp32": float(m["tensor_fp32_flops_per_ns"]),
        "tensor_fp8": float(m.get("tensor_fp8_flops_per_ns", m["tensor_bf16_flops_per_ns"])),
        "vector": float(m["vector_elems_per_ns"]),
    }
    engine = df["engine"].fillna("").astype(str).to_numpy(dtype=object)
    roof_compute = np.array(
        [f / peaks[e] if f > 0 and e in peaks else 0.0 for f, e in zip(flops, engine, strict=True)]
    )
    roof_memory = nbytes / float(m["hbm_bytes_per_ns"])

    compute = np.where(has_parts, np.nan_to_num(p_compute), roof_compute)
    dma = np.where(has_parts, np.nan_to_num(p_dma), np.where(collective, 0.0, roof_memory))
    fixed_col = np.where(has_parts, np.nan_to_num(p_latency), np.where(est >= 0, fixed, 0.0))
    overlap = np.where(has_parts, np.nan_to_num(p_overlap), 0.0)
    memory = np.where(collective, 0.0, dma)
    network = np.where(collective, dma, 0.0)

    parent = df["parent"].to_numpy()
    has_children = np.zeros(n, dtype=bool)
    has_children[parent[parent >= 0]] = True
    is_engine = category == "engine"
    fused_into = _fused_into(df)
    # An op inside a fused step: the step is its cost (the step is a leaf).
    leaf = (~has_children) & (~is_engine) & (fused_into < 0)

    bound = np.array([""] * n, dtype=object)
    for i in range(n):
        if est[i] <= 0:
            continue
        bound[i] = _bound(compute[i], memory[i], fixed_col[i], network[i], category[i])

    df["compute_ns"] = compute
    df["memory_ns"] = memory
    df["fixed_ns"] = fixed_col
    df["overlap_ns"] = overlap
    df["network_ns"] = network
    df["bound"] = bound
    df["has_children"] = has_children
    df["leaf"] = leaf
    df["attributed_ns"] = attributed_estimates(df)
    return df


def _fused_into(items: pd.DataFrame) -> np.ndarray:
    if "fused_into" not in items.columns:
        return np.full(len(items), -1, dtype=np.int64)
    return items["fused_into"].to_numpy(dtype=np.int64)


def attributed_estimates(items: pd.DataFrame) -> np.ndarray:
    """Each item's share of the top-level estimates, in ns, for tables per host op.

    A top-level item carries its own estimate (0 when it has none), except an
    adaptive-eager item (``adaptive_sequence``), whose ops each have their own host
    op: its estimate (one pipeline of its steps) goes to its steps in proportion to
    their estimates, and a fused step's share goes on to the ops it ran
    (``fused_into``) in proportion to their estimates alone (equal shares when they
    have none). Other children (a program's steps, engines) and what was passed on
    carry 0, so the column sums to the sum of the top-level estimates.
    """
    n = len(items)
    out = np.zeros(n)
    if not n:
        return out
    est = np.clip(items["estimate_ns"].to_numpy(dtype=float), 0, None)
    parent = items["parent"].to_numpy(dtype=np.int64)
    category = items["category"].astype(str).to_numpy()
    seq = (
        items["adaptive_sequence"].to_numpy()
        if "adaptive_sequence" in items.columns
        else np.zeros(n, dtype=np.int64)
    )
    fused_into = _fused_into(items)
    top = (parent < 0) & (category != "engine")
    out[top] = est[top]
    kids: dict[int, list[int]] = {}
    for i in np.flatnonzero(parent >= 0):
        kids.setdefault(int(parent[i]), []).append(int(i))
    for p in np.flatnonzero(top & (seq != 0)):
        steps = [k for k in kids.get(int(p), []) if category[k] != "engine" and fused_into[k] < 0]
        total = float(est[steps].sum()) if steps else 0.0
        if total <= 0:
            continue
        scale = out[p] / total
        out[p] = 0.0
        for k in steps:
            out[k] = est[k] * scale
    for f in np.flatnonzero(category == "fused"):
        ops = np.flatnonzero(fused_into == f)
        if not len(ops):
            continue
        alone = est[ops]
        weights = alone / alone.sum() if alone.sum() > 0 else np.full(len(ops), 1 / len(ops))
        out[ops] = out[f] * weights
        out[f] = 0.0
    return out


def _bound(compute: float, memory: float, fixed: float, network: float, category: str) -> str:
    if category == "collective":
        return "network" if network >= fixed else "latency"
    parts = {"compute": compute, "memory": memory, "latency": fixed}
    return max(parts, key=parts.__getitem__)  # first of equals: compute, then memory


def _union_ns(intervals: Iterable[tuple[int, int]]) -> int:
    total = 0
    cur_s = cur_e = None
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return int(total)


def _busy_ns(df: pd.DataFrame, start: str, end: str) -> int:
    """Time any stream of a device is busy, summed over devices (overlap counted once)."""
    return sum(
        _union_ns(zip(g[start].tolist(), g[end].tolist(), strict=True))
        for _, g in df.groupby("device")
    )


def _select_steps(prof, items: pd.DataFrame, steps) -> tuple[pd.DataFrame, int]:
    """The items of the requested steps, and the number of steps they span."""
    if isinstance(steps, int):
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        return items, steps
    selected, numbers = tables.select_steps(items, tables.ops(prof), steps)
    return selected, max(len(numbers), 1)


def step_summary(prof, steps=None, top: int = 10) -> dict[str, Any]:
    """Totals and the top items of prof's device work, with their bound.

    ``steps``: a list of step numbers = only the items queued during those
    ``ProfilerStep#N`` ranges (a scheduled profile's recorded steps), per-step
    figures divided by their number; None = all recorded steps (the whole profile
    when it has no ``ProfilerStep#N`` ranges: no schedule); an int = the whole
    profile, per-step figures divided by that.

    Returned keys (times in ns):

    * ``target``: the Trainium model (``_C._profiler_target()``);
    * ``steps``, ``items`` (top-level items), ``items_without_estimate``;
    * ``measured_ns``: sum of the top-level items' measured durations;
      ``measured_busy_ns``: the time any stream of a device was busy (overlaps once),
      summed over devices;
    * ``estimated_ns``: sum of the top-level items' estimates;
      ``estimated_busy_ns``: the same union over the estimated timeline;
    * ``flops``, ``bytes``: sums over leaf items (a program's steps, not the program);
    * ``compute_ns``, ``memory_ns``, ``latency_ns``, ``network_ns``: sums of the leaf
      items' parts; ``bound``: the largest; ``overlap_ns``: the sum of the leaf
      items' overlap (compute and DMA at once, subtracted from the others);
    * ``mfu``: estimated model-flops utilisation =
      ``flops / (tensor_bf16_flops_per_ns * estimated_busy_ns)`` (0 when nothing
      was estimated);
    * ``per_step``: measured_ns, estimated_ns, flops divided by ``steps``;
    * ``top``: the ``top`` leaf-item names with the largest estimated total, each a
      dict of name, category, count, estimated_ns, measured_ns, flops, bytes,
      compute_ns, memory_ns, latency_ns, bound and share (of estimated_ns). A fused
      step of adaptive eager (category ``"fused"``, named ``fused <first op> ..
      <last op>``) is one leaf with its own estimate, flops and bytes (what the
      group reads from outside and writes back); the ops it ran are not counted
      again.
    """
    model = target()
    items = tables.device_items(prof)
    items, n_steps = _select_steps(prof, items, steps)
    costs = item_costs(items.reset_index(drop=True), model)
    top_level = costs[(costs["parent"] < 0) & (costs["category"] != "engine")]
    leaves = costs[costs["leaf"]]
    with_est = top_level[top_level["estimate_ns"] >= 0]

    measured = int(top_level["duration_ns"].sum())
    estimated = int(with_est["estimate_ns"].sum())
    est_end = with_est["estimate_start_ns"] + with_est["estimate_ns"]
    est_df = pd.DataFrame(
        {"device": with_est["device"], "s": with_est["estimate_start_ns"], "e": est_end}
    )
    est_busy = _busy_ns(est_df, "s", "e") if len(est_df) else 0
    meas_busy = _busy_ns(top_level, "start_ns", "end_ns") if len(top_level) else 0

    leaf_est = leaves[leaves["estimate_ns"] >= 0]
    parts = {
        "compute": float(leaf_est["compute_ns"].sum()),
        "memory": float(leaf_est["memory_ns"].sum()),
        "latency": float(leaf_est["fixed_ns"].sum()),
        "network": float(leaf_est["network_ns"].sum()),
    }
    flops = float(leaves["flops"].sum())
    peak = float(model["tensor_bf16_flops_per_ns"])
    mfu = flops / (peak * est_busy) if est_busy > 0 else 0.0

    top_rows = []
    if len(leaves):
        g = leaves.assign(
            est=leaves["estimate_ns"].clip(lower=0),
            lat=leaves["fixed_ns"],
        ).groupby(["name", "category"], sort=False)
        agg = g.agg(
            count=("name", "size"),
            estimated_ns=("est", "sum"),
            measured_ns=("duration_ns", "sum"),
            flops=("flops", "sum"),
            bytes=("bytes", "sum"),
            compute_ns=("compute_ns", "sum"),
            memory_ns=("memory_ns", "sum"),
            latency_ns=("lat", "sum"),
            network_ns=("network_ns", "sum"),
            with_estimate=("estimate_ns", lambda s: int((s >= 0).sum())),
        ).reset_index()
        agg = agg.sort_values(["estimated_ns", "measured_ns"], ascending=False).head(top)
        for r in agg.itertuples(index=False):
            bound = ""
            if r.with_estimate and r.estimated_ns > 0:
                bound = _bound(r.compute_ns, r.memory_ns, r.latency_ns, r.network_ns, r.category)
            top_rows.append(
                {
                    "name": r.name,
                    "category": r.category,
                    "count": int(r.count),
                    "estimated_ns": int(r.estimated_ns),
                    "measured_ns": int(r.measured_ns),
                    "flops": float(r.flops),
                    "bytes": float(r.bytes),
                    "compute_ns": float(r.compute_ns),
                    "memory_ns": float(r.memory_ns),
                    "latency_ns": float(r.latency_ns),
                    "bound": bound,
                    "share": float(r.estimated_ns) / estimated if estimated else 0.0,
                }
            )

    overall = max(parts, key=parts.__getitem__) if any(parts.values()) else ""
    return {
        "target": model,
        "steps": n_steps,
        "items": len(top_level),
        "items_without_estimate": int((top_level["estimate_ns"] < 0).sum()),
        "measured_ns": measured,
        "measured_busy_ns": int(meas_busy),
        "estimated_ns": estimated,
        "estimated_busy_ns": int(est_busy),
        "flops": flops,
        "bytes": float(leaves["bytes"].sum()),
        "compute_ns": parts["compute"],
        "memory_ns": parts["memory"],
        "latency_ns": parts["latency"],
        "network_ns": parts["network"],
        "overlap_ns": float(leaf_est["overlap_ns"].sum()),
        "bound": overall,
        "mfu": mfu,
        "per_step": {
            "measured_ns": measured / n_steps,
            "estimated_ns": estimated / n_steps,
            "flops": flops / n_steps,
        },
        "top": top_rows,
    }


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def format_summary(s: dict[str, Any]) -> str:
    """A step_summary dict as a text report."""
    t = s["target"]["name"]
    out = io.StringIO()
    w = out.write
    w(f"Device work: {s['items']} items over {s['steps']} step(s), estimates for {t}\n")
    if s["items_without_estimate"]:
        w(f"  ({s['items_without_estimate']} items without an estimate)\n")
    w(
        f"  measured device time   {_ms(s['measured_ns']):>14}   busy {_ms(s['measured_busy_ns'])}"
        f"   per step {_ms(s['per_step']['measured_ns'])}\n"
    )
    w(
        f"  estimated {t} time    {_ms(s['estimated_ns']):>14}   busy {_ms(s['estimated_busy_ns'])}"
        f"   per step {_ms(s['per_step']['estimated_ns'])}\n"
    )
    total = s["compute_ns"] + s["memory_ns"] + s["latency_ns"] + s["network_ns"]
    if total > 0:
        w(
            "  estimate parts: "
            + ", ".join(
                f"{k} {s[k + '_ns'] / total:.0%}"
                for k in ("compute", "memory", "latency", "network")
                if s[k + "_ns"] > 0
            )
            + f"  -> {s['bound']}-bound\n"
        )
    w(f"  flops {s['flops']:.3e}, estimated MFU {s['mfu']:.1%} (of {t} bf16 peak)\n")
    if s["top"]:
        name_w = max(28, *(len(r["name"]) for r in s["top"]))
        name_w = min(name_w, 48)
        w(
            f"\n  {'item':<{name_w}} {'count':>6} {'est total':>12} {'measured':>12}"
            f" {'share':>6}  bound\n"
        )
        for r in s["top"]:
            w(
                f"  {r['name'][:name_w]:<{name_w}} {r['count']:>6} {_ms(r['estimated_ns']):>12}"
                f" {_ms(r['measured_ns']):>12} {r['share']:>6.1%}  {r['bound']}\n"
            )
    return out.getvalue()


def print_summary(prof, steps=None, top: int = 10, file=None) -> dict[str, Any]:
    """Prints :func:`step_summary` as text (to file, default stdout) and returns it."""
    s = step_summary(prof, steps=steps, top=top)
    print(format_summary(s), end="", file=file or sys.stdout)
    return s


def key_averages(prof) -> pd.DataFrame:
    """Per host-op name aggregates, PyTorch's key_averages with the estimated time.

    Columns (us): ``name``, ``count``, ``self_cpu_time_total``, ``cpu_time_total``,
    ``self_device_time_total``, ``device_time_total`` (PyTorch's measured figures),
    ``self_estimated_trainium_time_total`` (estimates of the device items the op's
    events queued themselves; of an adaptive-eager item, each op its share: the
    item's estimate split over its steps in proportion to theirs, a fused step's
    over the ops it ran in proportion to their estimates alone, see
    :func:`attributed_estimates`), ``estimated_trainium_time_total`` (the same including
    the items of all the events nested in them, as ``device_time_total`` does), and
    ``flops`` (of the items queued by the op's events and their children).
    Sorted by ``estimated_trainium_time_total``.
    """
    ops = tables.ops(prof)
    items = tables.device_items(prof)
    est = pd.Series(attributed_estimates(items), index=items.index) / 1e3
    carried = est > 0
    own_est = est[carried].groupby(items["correlation"][carried]).sum().to_dict()
    # A fused step's flops are its ops': counted once, with the ops.
    own_flops = (
        items[~items["category"].isin(["engine", "fused"])].groupby("correlation")["flops"].sum()
    )
    own_flops = own_flops.to_dict()

    corr = ops["correlation"].tolist()
    parent = dict(zip(corr, ops["parent"].tolist(), strict=True))
    incl_est = {c: 0.0 for c in corr}
    incl_flops = {c: 0.0 for c in corr}
    for c in corr:
        e, f = own_est.get(c, 0.0), own_flops.get(c, 0.0)
        if not e and not f:
            continue
        # Up the chain of enclosing events (ids unique; guard against cycles).
        seen = set()
        node = c
        while node in incl_est and node not in seen:
            seen.add(node)
            incl_est[node] += e
            incl_flops[node] += f
            node = parent.get(node, -1)
    df = pd.DataFrame(
        {
            "name": ops["name"].astype(str),
            "self_cpu_time_total": ops["self_cpu_time_us"],
            "cpu_time_total": ops["cpu_time_total_us"],
            "self_device_time_total": ops["self_device_time_us"],
            "device_time_total": ops["device_time_total_us"],
            "self_estimated_trainium_time_total": [own_est.get(c, 0.0) for c in corr],
            "estimated_trainium_time_total": [incl_est[c] for c in corr],
            "flops": [incl_flops[c] for c in corr],
        }
    )
    agg = df.groupby("name", sort=False).agg(
        count=("name", "size"),
        self_cpu_time_total=("self_cpu_time_total", "sum"),
        cpu_time_total=("cpu_time_total", "sum"),
        self_device_time_total=("self_device_time_total", "sum"),
        device_time_total=("device_time_total", "sum"),
        self_estimated_trainium_time_total=("self_estimated_trainium_time_total", "sum"),
        estimated_trainium_time_total=("estimated_trainium_time_total", "sum"),
        flops=("flops", "sum"),
    )
    agg = agg.reset_index().sort_values("estimated_trainium_time_total", ascending=False)
    return agg.reset_index(drop=True)


_TABLE_COLUMNS = (
    ("self_cpu_time_total", "Self CPU"),
    ("cpu_time_total", "CPU total"),
    ("self_device_time_total", "Self device"),
    ("device_time_total", "Device total"),
    ("self_estimated_trainium_time_total", "Self est. {t}"),
    ("estimated_trainium_time_total", "Est. {t} total"),
)


def _us(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:.3f}s"
    if v >= 1e3:
        return f"{v / 1e3:.3f}ms"
    return f"{v:.3f}us"


def table(prof, sort_by: str = "estimated_trainium_time_total", row_limit: int = 20) -> str:
    """:func:`key_averages` as a text table (PyTorch's time columns, then the
    estimated Trainium time), sorted by ``sort_by`` (a column name; PyTorch's names
    such as ``"self_cpu_time_total"``, ``"device_time_total"``, ``"count"`` work),
    at most ``row_limit`` rows (<= 0: all). Returns the text; ``print`` it."""
    df = key_averages(prof)
    key = sort_by.removesuffix("_us").replace("cuda", "device").replace("privateuse1", "device")
    if key not in df.columns:
        raise ValueError(f"sort_by={sort_by!r}: not one of {list(df.columns[1:])}")
    df = df.sort_values(key, ascending=False, kind="stable")
    if row_limit > 0:
        df = df.head(row_limit)
    t = target()["name"]
    heads = [h.format(t=t) for _, h in _TABLE_COLUMNS] + ["# Calls"]
    names = [str(n) for n in df["name"]]
    name_w = min(max([len("Name"), *(len(n) for n in names)]), 56)
    col_w = max(12, *(len(h) for h in heads))
    sep = "-" * name_w + "  " + "  ".join("-" * col_w for _ in heads)
    lines = [sep, f"{'Name':>{name_w}}  " + "  ".join(f"{h:>{col_w}}" for h in heads), sep]
    for n, row in zip(names, df.itertuples(index=False), strict=True):
        cells = [_us(getattr(row, c)) for c, _ in _TABLE_COLUMNS] + [str(row.count)]
        shown = n if len(n) <= name_w else n[: name_w - 3] + "..."
        lines.append(f"{shown:>{name_w}}  " + "  ".join(f"{c:>{col_w}}" for c in cells))
    lines.append(sep)
    return "\n".join(lines) + "\n"
