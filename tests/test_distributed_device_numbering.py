"""Device numbering as TorchNeuron's: a process started by a launcher numbers
its cores from its LOCAL_RANK (neuron:<local_rank> is its first device, as on
CUDA), gets NEURON_RT_VISIBLE_CORES=<local_rank> when it has none, and a
single process keeps neuron:0 .. neuron:<count - 1>."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dist_jobs.launch import check_all_ok, free_port, run_ranks

WORKER = str(Path(__file__).parent / "dist_jobs" / "device_numbering_worker.py")


def test_vendor_style_job_with_a_core_per_rank():
    outs = check_all_ok(
        run_ranks(
            WORKER,
            2,
            timeout=240,
            rank_env=lambda r: {"NEURON_RT_VISIBLE_CORES": str(r)},
        )
    )
    assert all("OK" in out for out in outs), outs


def test_launched_rank_gets_its_local_rank_core():
    # run_ranks clears NEURON_*: torch_neuronx sets the variable as the vendor's launcher does.
    outs = check_all_ok(run_ranks(WORKER, 2, timeout=240))
    assert all("OK" in out for out in outs), outs


def test_vendor_style_job_under_torchrun():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_", "TORCH_NEURONX_"))}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    cmd += ["--master-port", str(free_port()), WORKER]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    assert r.stdout.count("OK") == 2, r.stdout


PROBE = """
import json, sys, torch, torch_neuronx
first, count = torch_neuronx._C._device_range()
r = {"count": torch.neuron.device_count(), "current": torch.neuron.current_device(),
     "range": [first, count],
     "cores": [torch.neuron.get_device_properties(i).logical_core
               for i in range(first, first + count)]}
try:
    torch.empty(1, device=f"neuron:{first + count}")
except IndexError as e:
    r["error"] = str(e)
print(json.dumps(r))
"""


def probe(**env):
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NEURON_", "TORCH_NEURONX_")) and "LOCAL_" not in k
    }
    r = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_single_process_numbering_is_unchanged():
    r = probe()
    assert (r["count"], r["current"], r["range"]) == (4, 0, [0, 4])
    assert r["cores"] == [0, 1, 2, 3]
    assert "Valid range is 0 to 3 for this process" in r["error"], r["error"]


def test_single_process_with_a_core_range_numbers_from_zero():
    # As CUDA_VISIBLE_DEVICES=2,3: the visible cores are neuron:0 and neuron:1.
    r = probe(NEURON_RT_VISIBLE_CORES="2-3")
    assert (r["count"], r["current"], r["range"], r["cores"]) == (2, 0, [0, 2], [2, 3])
    assert "there are 2 visible neuron devices" in r["error"], r["error"]


@pytest.mark.parametrize(
    "local_rank,cores,want_range,want_count",
    [
        ("1", None, [1, 1], 2),  # the launcher's core: NEURON_RT_VISIBLE_CORES=1
        ("1", "2-3", [1, 2], 3),  # two cores per rank: neuron:1 and neuron:2
        ("3", "3", [3, 1], 4),
    ],
)
def test_launched_process_numbers_from_its_local_rank(local_rank, cores, want_range, want_count):
    env = {"LOCAL_RANK": local_rank, "LOCAL_WORLD_SIZE": "2" if local_rank == "1" else "4"}
    if cores:
        env["NEURON_RT_VISIBLE_CORES"] = cores
    r = probe(**env)
    assert r["range"] == want_range and r["current"] == want_range[0], r
    assert r["count"] == want_count, r
    first, n = want_range
    assert r["cores"] == (list(range(2, 4)) if cores == "2-3" else [int(local_rank)])
    assert f"Valid range is {first} to {first + n - 1} for this process" in r["error"]
    assert f"LOCAL_RANK={local_rank}" in r["error"]


def test_malformed_local_rank_is_reported_at_first_use():
    r = subprocess.run(
        [sys.executable, "-c", "import torch; torch.ones(1, device='neuron')"],
        env={**os.environ, "LOCAL_RANK": "abc"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0
    assert "invalid LOCAL_RANK='abc'" in r.stderr, r.stderr[-2000:]
