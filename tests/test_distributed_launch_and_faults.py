"""torch.distributed on neuron: ways to start a job, and jobs that go wrong —
a rank killed mid-job, ranks that disagree, bad arguments. No hang, a clear
DistBackendError on every survivor, nothing left in /dev/shm."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from dist_jobs.launch import check_all_ok, free_port, run_ranks

JOBS = Path(__file__).parent / "dist_jobs"
LAUNCH = str(JOBS / "launch_modes_worker.py")
FAULTS = str(JOBS / "faults_worker.py")


def _shm_segments():
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith("tnx-"))


@pytest.fixture(autouse=True)
def _no_segments_left():
    before = _shm_segments()
    yield
    assert _shm_segments() == before


@pytest.mark.parametrize(
    "mode,backend",
    [
        ("neuron", "neuron"),
        # Both CPU and neuron collectives work; get_backend() reports what torch
        # reports for any accelerator's default group.
        ("default", "undefined"),
        ("pair", "cpu:gloo,neuron:neuron"),
        ("tcpstore", "neuron"),
    ],
)
def test_init_modes(mode, backend):
    outs = check_all_ok(run_ranks(LAUNCH, 2, timeout=120, args=(mode,)))
    for out in outs:
        assert f"BACKEND {backend}" in out, out


def test_torchrun():
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(port),
        LAUNCH,
        "neuron",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("BACKEND neuron") == 2, r.stdout


def test_multiprocessing_spawn_with_file_store():
    r = subprocess.run(
        [sys.executable, LAUNCH, "spawn"], capture_output=True, text=True, timeout=180
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SPAWN OK" in r.stdout


def test_killed_rank_makes_survivors_raise():
    results = run_ranks(FAULTS, 3, timeout=120, args=("kill",), grace=60)
    assert results[2].returncode == -9
    for r in results[:2]:
        assert r.returncode == 0, r.stdout + r.stderr
        assert "RAISED" in r.stdout, r.stdout
        took = float(r.stdout.split("RAISED after ")[1].split("s")[0])
        assert took < 20 + 5, r.stdout  # within the group's timeout (+ a few seconds)


def test_set_timeout_bounds_later_collectives():
    # dist.set_timeout (TorchTitan calls it after its first step): applied, as gloo
    # applies it, not ignored with a warning.
    results = run_ranks(FAULTS, 2, timeout=120, args=("timeout",), grace=60)
    assert results[1].returncode == 0 and "LATE" in results[1].stdout, results[1].stderr
    out = results[0].stdout
    assert results[0].returncode == 0 and "RAISED" in out, out + results[0].stderr
    took = float(out.split("RAISED after ")[1].split("s")[0])
    assert took < 3 + 5, out  # the new 3 s bound (+ a few seconds), not the group's 20 s
    assert "does not support setting timeout" not in results[0].stderr


def test_mismatched_ranks_all_raise_and_group_stays_usable():
    outs = check_all_ok(run_ranks(FAULTS, 2, timeout=120, args=("mismatch",)))
    for out in outs:
        assert "RAISED" in out and "USABLE" in out, out


def test_bad_arguments_are_refused_at_the_call():
    # Two cores per rank, so that a rank has a device the group is not bound to.
    two_cores = lambda r: {"NEURON_RT_VISIBLE_CORES": f"{2 * r}-{2 * r + 1}"}  # noqa: E731
    outs = check_all_ok(run_ranks(FAULTS, 2, timeout=120, args=("misuse",), rank_env=two_cores))
    for out in outs:
        assert "USABLE" in out, out
        # A CPU tensor in a neuron-only group: torch's own message, as with NCCL.
        assert "cpu tensor: No backend type associated with device type cpu" in out, out
        assert "other device: neuron backend: allreduce: tensor on neuron:" in out, out
        assert "bool AVG: neuron backend: ReduceOp.AVG does not support bool" in out, out
