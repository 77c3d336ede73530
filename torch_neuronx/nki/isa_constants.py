"""``nki.isa.constants``: the named settings NeuronCore instructions take —
engines, DMA out-of-bounds and descriptor-generation modes, accumulator
commands, matmul performance modes and core generations.

Kernels import them from here (``from nki.isa.constants import oob_mode,
dge_mode``, as NKI-lib does) or through ``nki.isa`` / ``neuronxcc.nki.isa``,
which re-export them: one set of enums, so ``nisa.oob_mode.skip`` and
``constants.oob_mode.skip`` are the same member. Members and meanings are
those of NKI's "ISA config enums" pages.
"""

from __future__ import annotations

import enum


class engine(enum.IntEnum):  # noqa: N801 (NKI's name)
    """The engine an instruction runs on; ``unknown`` lets the compiler pick."""

    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    vector = 5
    sync = 6
    dma = 7


class oob_mode(enum.IntEnum):  # noqa: N801
    """What a DMA does with an index out of bounds: raise, or skip it."""

    error = 0
    skip = 1


class dge_mode(enum.IntEnum):  # noqa: N801
    """Descriptor Generation Engine mode of a DMA: none, software, hardware,
    or ``unknown`` (the compiler decides)."""

    none = 0
    swdge = 1
    hwdge = 2
    unknown = 3


class reduce_cmd(enum.IntEnum):  # noqa: N801
    """What an instruction does with the engine's accumulator registers."""

    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class nc_version(enum.IntEnum):  # noqa: N801
    """NeuronCore generations: gen2 (Trainium1), gen3 (Trainium2), gen4."""

    gen2 = 2
    gen3 = 3
    gen4 = 4


class matmul_perf_mode(enum.IntEnum):  # noqa: N801
    """Tensor-engine matmul mode: ``double_row`` packs two FP8 pairs per
    element for twice the throughput."""

    none = 0
    double_row = 1


class dma_engine(enum.IntEnum):  # noqa: N801
    """NKI 0.8's DMA engine choice (``nisa.dma_engine``): the shared DMA
    queues (the default) or GpSimd's internal DMA, for low-latency SBUF-to-SBUF
    swaps between the two cores of an LNC=2 launch (``nisa.sendrecv``). The
    simulator times both as DMA. (The original ISA's ``nisa.dma_engine`` is
    the engine constant ``engine.dma``: legacy_isa keeps that meaning.)"""

    dma = 0
    gpsimd_dma = 1


__all__ = [
    "dge_mode",
    "dma_engine",
    "engine",
    "matmul_perf_mode",
    "nc_version",
    "oob_mode",
    "reduce_cmd",
]
