"""The cost model's estimate of a kernel launch: time, per-engine busy time,
on-chip memory high-water marks."""

from __future__ import annotations

import functools
from dataclasses import dataclass

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")


@functools.cache
def _table() -> dict:
    from .. import _C

    return _C._hardware_table()


def hardware_targets() -> dict:
    """The Trainium generations the cost model knows, by name ("trn1", "trn2",
    "trn3"), with the figures it uses: the runtime's hardware table
    (runtime/include/neuron_runtime/hardware_table.h), not a copy."""
    return {name: dict(spec) for name, spec in _table()["targets"].items()}


def default_target() -> str:
    """The target estimates are made for when none is named ("trn2")."""
    return _table()["default"]


@dataclass(frozen=True)
class KernelProfile:
    """Estimated execution of one kernel launch on one NeuronCore."""

    kernel: str
    target: str  # a name of hardware_targets(): "trn2" (NeuronCore-v3), ...
    total_us: float
    busy_us: dict  # engine -> microseconds busy
    instructions: dict  # engine -> instruction count
    dma_bytes: int
    matmul_flops: int
    sbuf_high_water_bytes: int  # per partition
    psum_high_water_bytes: int  # per partition
    num_instructions: int

    @classmethod
    def from_dict(cls, kernel, target, d, n) -> KernelProfile:
        return cls(
            kernel=kernel,
            target=target,
            total_us=d["total_ns"] / 1e3,
            busy_us={k: v / 1e3 for k, v in d["busy_ns"].items()},
            instructions=dict(d["instructions"]),
            dma_bytes=int(d["dma_bytes"]),
            matmul_flops=int(d["matmul_flops"]),
            sbuf_high_water_bytes=int(d["sbuf_high_water"]),
            psum_high_water_bytes=int(d["psum_high_water"]),
            num_instructions=int(n),
        )

    @property
    def busy_percent(self) -> dict:
        t = self.total_us or 1.0
        return {k: 100.0 * v / t for k, v in self.busy_us.items()}

    @property
    def tflops(self) -> float:
        return self.matmul_flops / (self.total_us * 1e6) if self.total_us else 0.0

    def __str__(self) -> str:
        lines = [
            f"{self.kernel} on {self.target}: {self.total_us:.2f} us estimated, "
            f"{self.num_instructions} instructions"
        ]
        for e in ENGINES:
            lines.append(
                f"  {e:<7} {self.busy_us.get(e, 0.0):10.2f} us busy "
                f"({self.busy_percent.get(e, 0.0):5.1f}%), "
                f"{self.instructions.get(e, 0)} instructions"
            )
        lines.append(
            f"  SBUF high water {self.sbuf_high_water_bytes} B/partition, "
            f"PSUM {self.psum_high_water_bytes} B/partition, "
            f"DMA {self.dma_bytes / 1e6:.2f} MB, matmul {self.tflops:.1f} TFLOP/s"
        )
        return "\n".join(lines)
