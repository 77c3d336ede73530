"""torch.distributed on neuron: the `neuron` backend's collectives, run as real
multi-process jobs (one interpreter per rank, bounded in time)."""

import functools
from pathlib import Path

import pytest
import torch.distributed as dist
from dist_jobs.launch import check_all_ok, run_ranks, segments_created_by

HERE = Path(__file__).parent / "dist_jobs"


@functools.cache
def one_host_job(world: int):
    """The collectives job on one host: the ranks' results (run once per world size,
    whichever test asks first)."""
    return run_ranks(str(HERE / "collectives_worker.py"), world, timeout=300)


def test_backend_is_registered_for_the_neuron_device():
    assert "neuron" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["neuron"] == "neuron"
    assert dist.Backend.backend_capability["neuron"] == ["neuron"]


@pytest.mark.parametrize("world", [2, 3, 4])
def test_every_collective_on_every_dtype(world):
    outs = check_all_ok(one_host_job(world))
    for out in outs:
        assert "TRANSPORT shared_memory" in out, out[:500]
        assert "DONE" in out and ", 0 failed" in out, out


@pytest.mark.parametrize(
    "world,host_of,transport",
    [
        (4, lambda r: r // 2, "hierarchical"),  # 2 hosts x 2 ranks
        (4, lambda r: r % 2, "hierarchical"),  # interleaved: hosts {0, 2} and {1, 3}
        (3, lambda r: r // 2, "hierarchical"),  # uneven: 2 ranks + 1 rank
        (2, lambda r: r, "gloo"),  # one rank per host
    ],
    ids=["2x2", "interleaved", "uneven", "one-per-host"],
)
def test_every_collective_across_hosts(world, host_of, transport):
    # Ranks on different "hosts" (host identities) cannot share memory: gloo
    # carries what goes between hosts, on host views of the device memory; a
    # host's ranks still reduce and broadcast through their shared memory.
    outs = check_all_ok(
        run_ranks(
            str(HERE / "collectives_worker.py"),
            world,
            timeout=300,
            rank_env=lambda r: {"TORCH_NEURONX_HOST_ID": f"host{host_of(r)}"},
        )
    )
    for out in outs:
        assert f"TRANSPORT {transport}" in out, out[:500]
        assert "DONE" in out and ", 0 failed" in out, out


def test_debug_detail_checks_collectives():
    # TORCH_DISTRIBUTED_DEBUG=DETAIL wraps the group and checks every collective's
    # shapes across ranks (through a gloo helper group) before it runs.
    env = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}
    outs = check_all_ok(run_ranks(str(HERE / "collectives_worker.py"), 2, timeout=300, env=env))
    for out in outs:
        assert ", 0 failed" in out, out


@pytest.mark.parametrize("world", [2, 4])
def test_no_shared_memory_left_behind(world):
    # The segments are unlinked once every rank has mapped them: none of those the
    # job's ranks created (the world's, the sub-group's) is left in /dev/shm.
    left = segments_created_by(one_host_job(world))
    assert not left, left
