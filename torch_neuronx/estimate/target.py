"""The machine a plan is for: a Trainium generation, its logical-core size (LNC)
and the figures the report needs beyond the per-item cost model — the HBM a
core has, the tensor engine's peak (for MFU) and how cores group into chips and
hosts (for the collectives' topology).

The per-item figures live in the runtime's hardware table
(``torch_neuronx.nki.hardware_targets()``); this module reads them from there,
so a plan and the profiler's estimate use one table. HBM capacity per chip is
the vendor's published figure (not in that table):

- trn1: Trainium, 32 GiB HBM per chip, 2 NeuronCore-v2 (16 GiB each), no LNC
  (AWS Neuron docs, "Trainium architecture"; trn1.32xlarge: 16 chips, 512 GiB).
- trn2: Trainium2, 96 GiB HBM per chip, 8 NeuronCore-v3 (12 GiB each; LNC=2:
  24 GiB per logical core) (AWS Neuron docs, "Trainium2 architecture";
  trn2.48xlarge: 16 chips, 1.5 TiB). The runtime's topology uses the same
  24 GiB per logical core (runtime/include/neuron_runtime/topology.h).
- trn3: Trainium3, 144 GiB HBM per chip, 8 NeuronCore-v4 (18 GiB each)
  (AWS Neuron docs, "Trainium3 architecture").

Chips per host: trn1.32xlarge and trn2.48xlarge have 16 chips; a Trn3 server
is taken as 16 as well (the largest published single-host configuration is
not confirmed; the value only decides where a group crosses hosts).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import nki

GIB = 1 << 30

# Chip facts the hardware table does not carry: HBM per chip (bytes), chips per
# host. Sources in the module docstring.
_CHIP = {
    "trn1": {"hbm_bytes": 32 * GIB, "chips_per_host": 16},
    "trn2": {"hbm_bytes": 96 * GIB, "chips_per_host": 16},
    "trn3": {"hbm_bytes": 144 * GIB, "chips_per_host": 16},
}


def _hardware_table() -> dict:
    return nki.hardware_targets()


@dataclass(frozen=True)
class Target:
    """One NeuronCore as a plan sees it: ``name`` (trn1/trn2/trn3) at logical-core
    size ``lnc`` (physical cores per logical core; 1 on trn1)."""

    name: str
    lnc: int
    physical_cores_per_chip: int
    hbm_bytes_per_core: int  # per logical core
    tensor_bf16_flops_per_s: float  # per logical core
    tensor_fp32_flops_per_s: float  # per logical core
    chips_per_host: int

    @property
    def cores_per_chip(self) -> int:
        """Logical cores per chip."""
        return self.physical_cores_per_chip // self.lnc

    def peak_flops_per_s(self, dtype_bytes: int) -> float:
        """The tensor engine's peak per logical core for an element size: bf16/fp16
        (2 bytes, and fp8) at the bf16 rate, fp32 at its own."""
        return self.tensor_fp32_flops_per_s if dtype_bytes >= 4 else self.tensor_bf16_flops_per_s


def make_target(name: str = "trn2", lnc: int | None = None) -> Target:
    """The Target for a generation name and LNC (default: 2 where the generation
    has logical cores, else 1). Raises ValueError for an unknown name or an LNC the
    generation does not have."""
    table = _hardware_table()
    key = str(name).lower()
    if key not in table or key not in _CHIP:
        raise ValueError(f"unknown target {name!r}: expected one of {sorted(table)}")
    hw = table[key]
    logical = bool(hw["logical_cores"])
    if lnc is None or lnc == 0:
        lnc = 2 if logical else 1
    if not logical and lnc != 1:
        raise ValueError(f"{key} has no logical cores: lnc must be 1, not {lnc}")
    if logical and lnc not in (1, 2):
        raise ValueError(f"lnc must be 1 or 2 on {key}, not {lnc}")
    per_chip = int(hw["cores_per_chip"])
    chip = _CHIP[key]
    # The per-core tensor-engine peak the cost model uses (the table's sourced
    # per-core figure where it has one, else the chip's over its cores).
    bf16 = hw.get("core_tensor_bf16_tflops") or hw["tensor_bf16_tflops"] / per_chip
    fp32 = hw.get("core_tensor_fp32_tflops") or hw["tensor_fp32_tflops"] / per_chip
    return Target(
        name=key,
        lnc=int(lnc),
        physical_cores_per_chip=per_chip,
        hbm_bytes_per_core=chip["hbm_bytes"] // per_chip * lnc,
        tensor_bf16_flops_per_s=bf16 * 1e12 * lnc,
        tensor_fp32_flops_per_s=fp32 * 1e12 * lnc,
        chips_per_host=int(hw.get("chips_per_host") or chip["chips_per_host"]),
    )
