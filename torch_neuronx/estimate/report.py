"""The planning report: what a step would cost on the target, where the time
goes (per layer, per phase, per kind of item), what bounds it, the MFU, and
whether the rank's memory fits its core's HBM."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

GIB = 1 << 30


def _size(n: float) -> str:
    n = float(n)
    for unit, v in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= v:
            return f"{n / v:.2f} {unit}"
    return f"{n:.0f} B"


@dataclass
class Report:
    model: str
    mode: str  # "train" or "generate"
    target: str
    lnc: int
    tp: int
    fsdp: int
    dp: int
    cores: int
    batch: int  # sequences per data-parallel rank
    seq_len: int
    dtype: str
    # Time (seconds, per step, per rank)
    step_s: float  # the estimate: compute stream + exposed collectives
    serial_s: float  # every item one after another (the profiler's sum)
    compute_s: float  # compute and copy items (the sum of their estimates)
    collective_s: float  # every collective item
    exposed_collective_s: float  # the collectives' part of step_s
    parts_s: dict  # compute / dma / latency / overlap over compute items (s)
    bound: str  # compute, memory, latency or network
    bound_split: dict  # share of step_s by bound
    per_phase_s: dict
    per_layer: list  # [{"module", "s", "share"}], by step order
    per_group: dict  # collectives by group: {"tp": {"count", "bytes", "s"}, ...}
    top_items: list  # [{"name", "count", "s", "share", "bound"}]
    items: dict  # every item name -> {"count", "s"} (collectives by kind)
    n_items: int
    # Work
    model_flops: float  # per step, all ranks (the model's count)
    executed_flops: float  # tensor-engine flops of this rank's items
    mfu: float
    hfu: float  # executed flops / (peak x step): recompute included
    tokens_per_s: float  # whole job
    # Memory (per rank)
    hbm_peak_bytes: int
    hbm_capacity_bytes: int
    hbm_at_start_bytes: int  # parameters, optimizer state, inputs
    fits: bool
    # The run
    wall_s: float
    cost_calls: int
    prefill_s: float | None = None  # generate: the prompt's step
    decode_step_s: float | None = None  # generate: mean per new token
    new_tokens: int | None = None
    notes: list = field(default_factory=list)

    @property
    def hbm_margin_bytes(self) -> int:
        """Capacity minus peak: negative when it does not fit."""
        return self.hbm_capacity_bytes - self.hbm_peak_bytes

    def to_dict(self) -> dict:
        d = asdict(self)
        d["hbm_margin_bytes"] = self.hbm_margin_bytes
        return d

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    def __str__(self) -> str:
        L = []
        what = "training step" if self.mode == "train" else "generate()"
        L.append(
            f"Planning estimate: {self.model} {what} on {self.cores} x {self.target} "
            f"NeuronCores (LNC={self.lnc}), TP={self.tp} x FSDP={self.fsdp} x DP={self.dp}, "
            f"batch {self.batch} x seq {self.seq_len} per DP rank, {self.dtype}"
        )
        L.append(
            f"  step time     {self.step_s * 1e3:10.2f} ms  (compute {self.compute_s * 1e3:.2f} ms"
            f" + exposed collectives {self.exposed_collective_s * 1e3:.2f} ms;"
            f" all items in series {self.serial_s * 1e3:.2f} ms)"
        )
        if self.prefill_s is not None:
            L.append(
                f"  prefill       {self.prefill_s * 1e3:10.2f} ms;  per new token "
                f"{(self.decode_step_s or 0) * 1e3:.2f} ms over {self.new_tokens} tokens"
            )
        L.append(
            f"  throughput    {self.tokens_per_s:10.1f} tokens/s (job)   MFU {self.mfu * 100:.1f}%"
            f"   HFU {self.hfu * 100:.1f}%"
        )
        bs = ", ".join(f"{k} {v * 100:.0f}%" for k, v in self.bound_split.items() if v > 0.0005)
        L.append(f"  bound         {self.bound}  ({bs})")
        fit = "fits" if self.fits else "DOES NOT FIT"
        m = self.hbm_margin_bytes
        L.append(
            f"  HBM per core  peak {_size(self.hbm_peak_bytes)} of "
            f"{_size(self.hbm_capacity_bytes)}: {fit} "
            f"({'spare' if m >= 0 else 'over by'} {_size(abs(m))}; "
            f"{_size(self.hbm_at_start_bytes)} held before the step)"
        )
        if self.per_phase_s:
            ph = ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in self.per_phase_s.items())
            L.append(f"  phases        {ph}")
        if self.per_group:
            L.append("  collectives   group      count        bytes      time")
            for g, v in self.per_group.items():
                L.append(
                    f"                {g:<8} {v['count']:7d} {v['bytes'] / 2**20:10.1f} MiB "
                    f"{v['s'] * 1e3:8.2f} ms"
                )
        if self.per_layer:
            L.append("  per layer (estimated time, share of all items):")
            for r in self.per_layer[:12]:
                L.append(f"    {r['module']:<48} {r['s'] * 1e3:9.3f} ms {r['share'] * 100:5.1f}%")
            if len(self.per_layer) > 12:
                rest = sum(r["s"] for r in self.per_layer[12:])
                L.append(f"    ... {len(self.per_layer) - 12} more{'':<38} {rest * 1e3:9.3f} ms")
        if self.top_items:
            L.append("  top items:")
            for r in self.top_items[:10]:
                L.append(
                    f"    {r['name']:<48} x{r['count']:<6d} {r['s'] * 1e3:9.3f} ms "
                    f"{r['share'] * 100:5.1f}%  {r['bound']}"
                )
        L.append(
            f"  ({self.n_items} device items; planned in {self.wall_s:.1f} s with "
            f"{self.cost_calls} cost-model calls)"
        )
        for n in self.notes:
            L.append(f"  note: {n}")
        return "\n".join(L)
