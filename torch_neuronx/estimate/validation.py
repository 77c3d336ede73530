"""The estimated Trainium time against every published Trainium figure whose
workload can be reproduced here (docs/profiling.md, "Validation against
published figures").

Each row of published_figures.FIGURES is estimated by the project's own
cost models, nothing typed in:

- "nki": the row's kernel (validation_kernels.py) traced on the published
  shapes with ``torch_neuronx.nki.estimate`` (nothing runs);
- "collective": ``torch_neuronx._C._estimate_collective`` on the published
  ranks and topology;
- "model": a planning run of the model's step (``torch_neuronx.estimate``).

``python -m torch_neuronx.estimate.validation [--markdown] [--rows A,B]``
prints the table; ``--write-docs docs/profiling.md`` replaces the table
between the markers of that file's validation section. Nothing here is
tuned to the published figures: a row outside +-25% stays, with its reason.

The NKI rows import NKI's own names (``neuronxcc``) when they run: they may
be absent (a row that cannot be estimated says why), as may transformers for
the model rows (``validation_models.py``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import math
import multiprocessing
import sys
import time
from dataclasses import dataclass

from .. import _C
from .. import nki as tnki
from . import validation_models
from .published_figures import FIGURES, Figure

TOLERANCE = 0.25
BEGIN_MARK = (
    "<!-- validation-table:begin "
    "(python -m torch_neuronx.estimate.validation --write-docs docs/profiling.md) -->"
)
END_MARK = "<!-- validation-table:end -->"
_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


@dataclass
class Row:
    figure: Figure
    ours_s: float | None  # our estimate in seconds (None: not estimated)
    detail: str = ""  # what bounds the estimate (engines, steps)
    error: str = ""  # why no estimate

    @property
    def ours(self) -> float | None:
        """Our estimate in the row's unit."""
        return None if self.ours_s is None else self.ours_s / _UNIT_S[self.figure.unit]

    @property
    def ratio(self) -> float | None:
        return None if self.ours is None else self.ours / self.figure.published

    @property
    def within(self) -> bool | None:
        r = self.ratio
        return None if r is None else abs(r - 1.0) <= TOLERANCE


# ---------------------------------------------------------------- NKI rows


def _kernel(name: str):
    from . import validation_kernels as vk  # optional: imports neuronxcc (module docstring)

    family, _, variant = name.partition(":")
    if family == "matmul":
        return vk.MATMUL_TUTORIAL[variant]
    if family == "mamba":
        return vk.MAMBA_TUTORIAL[variant]
    return getattr(vk, name)


def _estimate_nki(fig: Figure) -> tuple[float, str]:
    import neuronxcc.nki.language as nl  # optional: neuronxcc (module docstring)

    specs = [tnki.typing.tensor[list(shape), getattr(nl, dt)] for shape, dt in fig.spec["args"]]
    p = tnki.estimate(_kernel(fig.spec["kernel"]), *specs, target=fig.target)
    busy = ", ".join(f"{e} {v:.0f}%" for e, v in p.busy_percent.items() if v >= 5)
    return p.total_us * 1e-6, f"busy: {busy}"


# --------------------------------------------------------- collective rows


def _estimate_collective(fig: Figure) -> tuple[float, str]:
    if not hasattr(_C, "_estimate_collective"):
        raise RuntimeError("needs torch_neuronx._C._estimate_collective (not built yet)")
    s = fig.spec
    d = _C._estimate_collective(
        s["op"],
        float(s["bytes"]),
        list(range(int(s["ranks"]))),
        target=fig.target,
        lnc=fig.lnc,
        ranks_per_chip=int(s.get("ranks_per_chip", 0)),
        chips_per_host=int(s.get("chips_per_host", 0)),
    )
    parts = ", ".join(
        f"{k.removesuffix('_ns')} {d[k] / 1e3:.1f} us"
        for k in ("latency_ns", "dma_ns", "compute_ns")
        if d.get(k)
    )
    return d["estimate_ns"] * 1e-9, parts


# -------------------------------------------------------------- model rows


def _estimate_model(fig: Figure) -> tuple[float, str]:
    return validation_models.estimate(fig)


_ESTIMATORS = {
    "nki": _estimate_nki,
    "collective": _estimate_collective,
    "model": _estimate_model,
}


def _estimate(fig: Figure) -> Row:
    try:
        seconds, detail = _ESTIMATORS[fig.spec["kind"]](fig)
        return Row(fig, seconds, detail)
    except Exception as e:  # a row that cannot be estimated yet says why
        return Row(fig, None, error=f"{type(e).__name__}: {e}".splitlines()[0][:160])


def _estimate_in_child(names: list) -> list:
    by = {f.name: f for f in FIGURES}
    out = []
    for n in names:
        r = _estimate(by[n])
        out.append((n, r.ours_s, r.detail, r.error))
    return out


def compute(names=None, *, progress=None, jobs: int = 1) -> list[Row]:
    """Our estimate of each figure (all, or those named), in table order.
    ``jobs=2``: the NKI rows in a second process while this one estimates the
    others (the same functions; the results do not depend on ``jobs``)."""
    wanted = None if names is None else set(names)
    if wanted is not None:
        unknown = wanted - {f.name for f in FIGURES}
        if unknown:
            raise KeyError(f"unknown rows: {sorted(unknown)}")
    figs = [f for f in FIGURES if wanted is None or f.name in wanted]
    child = None
    if jobs > 1:
        nki = [f.name for f in figs if f.spec["kind"] == "nki"]
        if nki:
            pool = concurrent.futures.ProcessPoolExecutor(
                1, mp_context=multiprocessing.get_context("spawn")
            )
            child = (pool, pool.submit(_estimate_in_child, nki), set(nki))
    done = {}
    for fig in figs:
        if child is not None and fig.name in child[2]:
            continue
        t0 = time.perf_counter()
        done[fig.name] = _estimate(fig)
        if progress is not None:
            progress(done[fig.name], time.perf_counter() - t0)
    if child is not None:
        pool, fut, _ = child
        by = {f.name: f for f in figs}
        try:
            for n, s, detail, error in fut.result():
                done[n] = Row(by[n], s, detail, error)
        finally:
            pool.shutdown()
    return [done[f.name] for f in figs]


# ---------------------------------------------------------------- output


def fmt(value: float | None) -> str:
    """Three significant digits, as in the docs table."""
    if value is None:
        return "—"
    if value == 0 or not math.isfinite(value):
        return str(value)
    digits = max(0, 2 - int(math.floor(math.log10(abs(value)))))
    return f"{value:,.{digits}f}"


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


HEADER = (
    "| row | workload | target | published | ours | ours / published | source (quoted) | note |\n"
    "|---|---|---|---|---|---|---|---|"
)


def markdown(rows: list[Row]) -> str:
    lines = [HEADER]
    for r in rows:
        f = r.figure
        tgt = f.target + (f", LNC={f.lnc}" if f.target != "trn1" else "")
        ratio = "—" if r.ratio is None else f"{r.ratio:.2f}" + ("" if r.within else " (out)")
        note = f.note
        if r.error:
            note = f"not estimated: {r.error}. " + note
        lines.append(
            "| "
            + " | ".join(
                _cell(c)
                for c in (
                    f"`{f.name}`",
                    f.workload,
                    tgt,
                    f"{fmt(f.published)} {f.unit}",
                    f"{fmt(r.ours)} {f.unit}" if r.ours is not None else "—",
                    ratio,
                    f"[source]({f.source}): “{f.quote}”",
                    note,
                )
            )
            + " |"
        )
    return "\n".join(lines)


def text(rows: list[Row]) -> str:
    out = []
    for r in rows:
        f = r.figure
        ours = "—" if r.ours is None else f"{fmt(r.ours)} {f.unit}"
        ratio = "   —" if r.ratio is None else f"{r.ratio:5.2f}" + ("" if r.within else " out")
        out.append(
            f"{f.name:<32} {f.target:<5} published {fmt(f.published):>9} {f.unit:<2}  "
            f"ours {ours:>12}  x{ratio}  {r.detail or r.error}"
        )
    return "\n".join(out)


def summary(rows: list[Row]) -> str:
    est = [r for r in rows if r.ratio is not None]
    inside = sum(1 for r in est if r.within)
    return f"{len(rows)} rows, {len(est)} estimated, {inside} within ±{TOLERANCE:.0%}" + (
        f", ratios {min(r.ratio for r in est):.2f}–{max(r.ratio for r in est):.2f}" if est else ""
    )


def write_docs(path: str, table: str) -> None:
    with open(path, encoding="utf-8") as fh:
        doc = fh.read()
    try:
        a = doc.index(BEGIN_MARK) + len(BEGIN_MARK)
        b = doc.index(END_MARK, a)
    except ValueError:
        raise SystemExit(f"{path}: no validation-table markers") from None
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(doc[:a] + "\n" + table + "\n" + doc[b:])


def docs_table(path: str) -> str:
    """The table between the markers of ``path`` (what the test compares)."""
    with open(path, encoding="utf-8") as fh:
        doc = fh.read()
    a = doc.index(BEGIN_MARK) + len(BEGIN_MARK)
    return doc[a : doc.index(END_MARK, a)].strip()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m torch_neuronx.estimate.validation")
    ap.add_argument("--markdown", action="store_true", help="print the docs table")
    ap.add_argument("--rows", help="comma-separated row names (default: all)")
    ap.add_argument("--write-docs", metavar="PATH", help="replace the table in PATH")
    ap.add_argument("--list", action="store_true", help="list the rows and their sources")
    ap.add_argument(
        "--jobs", type=int, default=1, help="2: the NKI rows in a second process (faster)"
    )
    args = ap.parse_args(argv)
    if args.list:
        for f in FIGURES:
            print(f"{f.name:<32} {f.target:<5} {f.published:g} {f.unit}  {f.source}")
        return 0
    names = args.rows.split(",") if args.rows else None
    if args.write_docs and names:
        ap.error("--write-docs needs every row")

    def progress(row, took):
        print(f"  {row.figure.name}: {took:.1f} s", file=sys.stderr)

    rows = compute(names, progress=progress, jobs=args.jobs)
    table = markdown(rows)
    print(table if args.markdown or args.write_docs else text(rows))
    print(summary(rows), file=sys.stderr)
    if args.write_docs:
        write_docs(args.write_docs, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
