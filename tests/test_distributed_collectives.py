"""torch.distributed on neuron: the `neuron` backend's collectives, run as real
multi-process jobs (one interpreter per rank, bounded in time)."""

import os
from pathlib import Path

import pytest
import torch.distributed as dist
from dist_jobs.launch import check_all_ok, run_ranks

HERE = Path(__file__).parent / "dist_jobs"


def test_backend_is_registered_for_the_neuron_device():
    assert "neuron" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["neuron"] == "neuron"
    assert dist.Backend.backend_capability["neuron"] == ["neuron"]


@pytest.mark.parametrize("world", [2, 3, 4])
def test_every_collective_on_every_dtype(world):
    outs = check_all_ok(run_ranks(str(HERE / "collectives_worker.py"), world, timeout=300))
    for out in outs:
        assert "DONE" in out and ", 0 failed" in out, out


def test_every_collective_across_two_hosts():
    # Ranks 0-1 and 2-3 on different "hosts" (host identities): the group cannot
    # share memory, so gloo carries it, on host views of the device memory.
    outs = check_all_ok(
        run_ranks(
            str(HERE / "collectives_worker.py"),
            4,
            timeout=300,
            rank_env=lambda r: {"TORCH_NEURONX_HOST_ID": f"host{r // 2}"},
        )
    )
    for out in outs:
        assert "DONE" in out and ", 0 failed" in out, out


def test_debug_detail_checks_collectives():
    # TORCH_DISTRIBUTED_DEBUG=DETAIL wraps the group and checks every collective's
    # shapes across ranks (through a gloo helper group) before it runs.
    env = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}
    outs = check_all_ok(run_ranks(str(HERE / "collectives_worker.py"), 2, timeout=300, env=env))
    for out in outs:
        assert ", 0 failed" in out, out


def test_no_shared_memory_left_behind():
    run_ranks(str(HERE / "collectives_worker.py"), 2, timeout=300)
    left = [n for n in os.listdir("/dev/shm") if n.startswith("tnx-")]
    assert not left, left
