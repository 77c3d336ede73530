"""The cost of one device item and of one collective: the C++ functions the
profiler's estimate uses (``torch_neuronx._C._estimate_op`` and
``_estimate_collective``, over the same tensors the eager kernel records), so a
planned item and a profiled one get the same number. Costs are cached per
signature (op name, sizes, element sizes): a model's layers repeat, so a step of
tens of thousands of items costs a few hundred C++ calls.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import _C
from .target import Target

PARTS = ("compute_ns", "dma_ns", "latency_ns", "overlap_ns")


@dataclass(frozen=True)
class Cost:
    """An item's estimate and its parts (ns), as the profiler reports them."""

    estimate_ns: float
    compute_ns: float
    dma_ns: float
    latency_ns: float
    overlap_ns: float
    flops: float
    bytes: float
    tensor_engine: bool
    engine: str

    @property
    def bound(self) -> str:
        """The part that decides the item: compute, memory (DMA) or latency."""
        parts = {"compute": self.compute_ns, "memory": self.dma_ns, "latency": self.latency_ns}
        return max(parts, key=parts.get)


def _cost(d: dict) -> Cost:
    return Cost(
        estimate_ns=float(d["estimate_ns"]),
        compute_ns=float(d.get("compute_ns", 0.0)),
        dma_ns=float(d.get("dma_ns", 0.0)),
        latency_ns=float(d.get("latency_ns", 0.0)),
        overlap_ns=float(d.get("overlap_ns", 0.0)),
        flops=float(d.get("flops", 0.0)),
        bytes=float(d.get("bytes", 0.0)),
        tensor_engine=bool(d.get("tensor_engine", False)),
        engine=str(d.get("engine", "")),
    )


def has_native_costs() -> bool:
    """Whether the extension has the estimate bindings."""
    return hasattr(_C, "_estimate_op") and hasattr(_C, "_estimate_collective")


class CostModel:
    """Costs on one target, cached by signature."""

    def __init__(self, target: Target):
        self.target = target
        self._ops: dict = {}
        self._collectives: dict = {}
        if not has_native_costs():
            raise RuntimeError(
                "torch_neuronx._C has no _estimate_op/_estimate_collective: the extension "
                "is older than the planning mode; rebuild it (ninja -C build/ext _C)"
            )
        self.native = True
        self.calls = 0  # C++ calls made (cache misses)

    def op(self, name: str, sizes: tuple, itemsizes: tuple) -> Cost:
        key = (name, sizes, itemsizes)
        c = self._ops.get(key)
        if c is None:
            self.calls += 1
            d = _C._estimate_op(
                name, [list(s) for s in sizes], list(itemsizes), self.target.name, self.target.lnc
            )
            c = self._ops[key] = _cost(d)
        return c

    def collective(self, kind: str, nbytes: float, ranks: tuple) -> Cost:
        key = (kind, float(nbytes), ranks)
        c = self._collectives.get(key)
        if c is None:
            self.calls += 1
            t = self.target
            # ranks_per_chip: logical cores per chip at this LNC.
            d = _C._estimate_collective(
                kind,
                float(nbytes),
                list(ranks),
                t.name,
                t.lnc,
                t.cores_per_chip,
                t.chips_per_host,
            )
            c = self._collectives[key] = _cost(d)
        return c
