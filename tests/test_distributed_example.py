"""examples/distributed/train_llama.py: DDP over 2 ranks and FSDP2 x TP over a 2 x 2
mesh train exactly like one process on the same global batch."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dist_jobs.launch import free_port

SCRIPT = str(Path(__file__).resolve().parents[1] / "examples" / "distributed" / "train_llama.py")
STEPS = 4


def _run(mode, tmp_path, nproc=None):
    out = tmp_path / f"{mode}.json"
    args = [SCRIPT, "--mode", mode, "--steps", str(STEPS), "--out", str(out)]
    if nproc:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc)]
        cmd += ["--master-port", str(free_port()), *args]
    else:
        cmd = [sys.executable, *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return _run("single", tmp_path_factory.mktemp("single"))


@pytest.mark.parametrize("mode,nproc", [("ddp", 2), ("fsdp_tp", 4)])
def test_losses_match_one_process(single, mode, nproc, tmp_path):
    got = _run(mode, tmp_path, nproc)
    assert len(got["losses"]) == STEPS
    assert got["losses"] == pytest.approx(single["losses"], rel=1e-4), (
        got["losses"],
        single["losses"],
    )
    if mode == "fsdp_tp":
        # Each of the 4 ranks holds about a quarter of the parameters.
        assert got["rank_param_bytes"] <= 0.3 * got["full_param_bytes"]
        assert got["memory_allocated_after_sharding"] <= 0.3 * got["full_param_bytes"]


def test_two_hosts_train_like_one(single, tmp_path):
    # Two "hosts" on this machine: torchrun --nnodes 2, once per node, each node
    # with its own host identity, so the group spans hosts and gloo carries it.
    port = free_port()
    out = tmp_path / "two_hosts.json"
    procs = []
    for node in range(2):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2"]
        cmd += ["--node-rank", str(node), "--nproc-per-node", "2"]
        cmd += ["--master-addr", "127.0.0.1", "--master-port", str(port)]
        cmd += [SCRIPT, "--mode", "fsdp_tp", "--steps", str(STEPS), "--out", str(out)]
        env = {**os.environ, "TORCH_NEURONX_HOST_ID": f"node{node}"}
        procs.append(
            subprocess.Popen(
                cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=300)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, log in zip(procs, logs, strict=True):
        assert p.returncode == 0, log[-6000:]
    got = json.loads(out.read_text())
    assert got["losses"] == pytest.approx(single["losses"], rel=1e-4), (
        got["losses"],
        single["losses"],
    )
