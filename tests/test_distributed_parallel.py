"""The parallelism libraries on the neuron backend, unmodified: functional
collectives, DDP, FSDP2, DTensor and tensor parallelism, pipelining, distributed
checkpointing. Each test runs one job (one interpreter per rank, bounded in time)
whose ranks compare their results with a single-process reference and print
``DONE <n> checks, <k> failed``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dist_jobs.launch import check_all_ok, run_ranks

JOBS = Path(__file__).parent / "dist_jobs"


def run_job(script: str, world: int, timeout: float = 150, args: tuple[str, ...] = ()):
    outs = check_all_ok(run_ranks(str(JOBS / script), world, timeout=timeout, args=args))
    for rank, out in enumerate(outs):
        assert ", 0 failed" in out and "DONE" in out, f"rank {rank}:\n{out[-4000:]}"
        assert "DONE 0 checks" not in out, f"rank {rank} checked nothing"
    return outs


def test_functional_collectives():
    run_job("funcol_worker.py", 2)


def test_ddp():
    run_job("ddp_worker.py", 2)


def test_fsdp2_fully_shard():
    run_job("fsdp_worker.py", 2)
