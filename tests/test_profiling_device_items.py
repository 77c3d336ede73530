"""What NKI kernels, compiled programs and collectives tell the profiler about their
device items: categories, estimates, children and details, in
``_C._profiler_items()`` and in the exported chrome trace."""

import json
import os
import subprocess
import sys
from pathlib import Path

import neuronxcc.nki.isa as nisa
import nki
import nki.language as nl
import pytest
import torch
from device_trace import assert_one_pipeline
from dist_jobs.launch import check_all_ok, run_ranks, segments_created_by
from torch.profiler import ProfilerActivity, profile

import torch_neuronx
import torch_neuronx.nki as tnki

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
ENGINE_LABELS = {
    "tensor": "Tensor Engine",
    "vector": "Vector Engine",
    "scalar": "Scalar Engine",
    "gpsimd": "GpSimd Engine",
    "dma": "DMA",
}


@nki.jit
def matmul_exp(a, n):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    stationary = nl.load(a[0:128, 0:128])
    moving = nl.load(a[0:128, :])
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    for _ in nl.affine_range(n):
        acc += nisa.nc_matmul(stationary, moving)
    nl.store(out, value=nl.exp(acc))
    return out


def detail(item) -> dict:
    return dict(kv.split("=", 1) for kv in item["detail"].split(";") if kv)


def children(items, index):
    return [c for c in items if c["parent"] == index]


def profiled(fn, tmp_path=None):
    """Runs ``fn`` under the profiler; the device items and, with ``tmp_path``,
    the exported chrome trace's events."""
    torch.neuron.synchronize()
    with profile(activities=ACTIVITIES) as prof:
        fn()
        torch.neuron.synchronize()
    items = torch_neuronx._C._profiler_items()
    if tmp_path is None:
        return items, None
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return items, json.loads(path.read_text())["traceEvents"]


@pytest.fixture(scope="module")
def operand():
    a = torch.randn(128, 512, dtype=torch.bfloat16, device="neuron")
    matmul_exp(a, 4)  # traced and built outside the profiles
    torch.neuron.synchronize()
    return a


def test_nki_kernel_is_a_kernel_item_with_engine_children(operand, tmp_path):
    items, events = profiled(lambda: matmul_exp(operand, 4), tmp_path)
    want = tnki.estimate(matmul_exp, operand, 4)  # the simulator's cost model
    [k] = [i for i, it in enumerate(items) if it["name"] == "nki::matmul_exp"]
    kernel = items[k]
    assert kernel["category"] == "kernel" and kernel["parent"] == -1
    assert kernel["estimate_ns"] == round(want.total_us * 1e3)
    assert kernel["flops"] == want.matmul_flops == 4 * 2 * 128 * 128 * 512
    assert kernel["bytes"] == want.dma_bytes
    assert detail(kernel) == {"kernel": "matmul_exp"}

    # One child per engine the kernel keeps busy, with its busy time.
    engines = children(items, k)
    busy = {ENGINE_LABELS[e]: us for e, us in want.busy_us.items() if us > 0}
    assert {c["name"] for c in engines} == set(busy) >= {"Tensor Engine", "DMA", "Scalar Engine"}
    for c in engines:
        assert c["category"] == "engine"
        assert c["estimate_ns"] == round(busy[c["name"]] * 1e3)
        # Estimates only: they overlap inside the kernel's estimated span.
        assert kernel["estimate_start_ns"] <= c["estimate_start_ns"]
        assert c["estimate_ns"] <= kernel["estimate_ns"]
    tensor = next(c for c in engines if c["name"] == "Tensor Engine")
    assert detail(tensor) == {"engine": "tensor", "instructions": "4"}

    # The chrome trace: the kernel on the device track, it and its engines on the
    # estimated track (tid = stream + 1000) with the estimates as durations.
    [dev] = [e for e in events if e.get("cat") == "kernel" and e["name"] == "nki::matmul_exp"]
    assert dev["args"]["kernel"] == "matmul_exp"
    assert dev["args"]["flops"] == want.matmul_flops
    estimated = {
        e["name"]: e
        for e in events
        if e.get("ph") == "X" and isinstance(e.get("tid"), int) and e["tid"] >= 1000
    }
    assert estimated["nki::matmul_exp"]["dur"] == pytest.approx(kernel["estimate_ns"] / 1e3)
    for name, us in busy.items():
        assert estimated[name]["dur"] == pytest.approx(round(us * 1e3) / 1e3)
        assert estimated[name]["args"]["category"] == "engine"


def test_nki_kernel_estimate_follows_the_profiler_target(operand):
    torch_neuronx._C._profiler_set_target("trn1")
    try:
        items, _ = profiled(lambda: matmul_exp(operand, 4))
    finally:
        torch_neuronx._C._profiler_set_target("trn2")
    [kernel] = [it for it in items if it["name"] == "nki::matmul_exp"]
    want = tnki.estimate(matmul_exp, operand, 4, target="trn1")
    assert kernel["estimate_ns"] == round(want.total_us * 1e3)
    assert kernel["estimate_ns"] != round(tnki.estimate(matmul_exp, operand, 4).total_us * 1e3)


def test_profiler_targets_are_the_hardware_table():
    with pytest.raises(ValueError, match=r"unknown target 'trn9' \(valid: trn1, trn2, trn3\)"):
        torch_neuronx._C._profiler_set_target("trn9")
    lnc = torch.neuron.get_device_properties(0).physical_cores_per_logical_core
    table = tnki.hardware_targets()
    try:
        for name, hw in table.items():
            torch_neuronx._C._profiler_set_target(name)
            t = torch_neuronx._C._profiler_target()
            cores = lnc if hw["logical_cores"] else 1
            assert t["name"] == name and t["physical_cores_per_device"] == cores
            assert t["hbm_bytes_per_ns"] == pytest.approx(
                hw["hbm_gb_per_s"] / hw["cores_per_chip"] * cores
            )
    finally:
        torch_neuronx._C._profiler_set_target("trn2")


def test_an_unknown_profile_target_in_the_environment_fails_at_first_use():
    code = "import torch, torch_neuronx; torch.ones(1, device='neuron')"
    env = dict(os.environ, TORCH_NEURONX_PROFILE_TARGET="trn9")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "TORCH_NEURONX_PROFILE_TARGET: unknown target 'trn9' (valid: trn1, trn2, trn3)" in (
        r.stderr
    )


def test_compiled_program_is_one_item_with_steps(tmp_path):
    @torch.compile(backend="neuron")
    def f(x, w):
        return torch.relu(x @ w) * 2 + x

    x = torch.randn(64, 32, device="neuron")
    w = torch.randn(32, 32, device="neuron")
    f(x, w)  # compiled outside the profile
    items, events = profiled(lambda: f(x, w), tmp_path)
    programs = [i for i, it in enumerate(items) if it["category"] == "program"]
    assert len(programs) == 1, items
    p = programs[0]
    program = items[p]
    assert program["name"].startswith("compiled graph")
    assert detail(program) == {"program": program["name"]}
    steps = children(items, p)
    # The Inductor kernel is a step with its arguments' traffic; the matmul, an
    # extern call, is the eager op (which describes itself).
    [kernel] = [s for s in steps if s["category"] == "step"]
    assert kernel["name"].startswith("cpp_fused")
    # Its tensor arguments: x and the matmul's result (written in place, or into
    # an output of its own).
    assert kernel["bytes"] in (2 * 64 * 32 * 4, 3 * 64 * 32 * 4)
    assert kernel["flops"] == 64 * 32
    assert "aten::mm.out" in {s["name"] for s in steps}
    assert all(s["estimate_ns"] > 0 for s in steps)
    # One pipeline, not the plain sum of its steps: their compute and DMA summed and
    # overlapped, one launch and one DMA start.
    compute, dma, t = assert_one_pipeline(program, steps)
    assert program["estimate_ns"] == pytest.approx(
        max(compute, dma) + t["launch_ns"] + t["dma_start_ns"], abs=1
    )
    assert program["estimate_ns"] < sum(s["estimate_ns"] for s in steps)
    # Steps one after another on the estimated timeline, scaled into the program's.
    at = program["estimate_start_ns"]
    end = program["estimate_start_ns"] + program["estimate_ns"]
    for s in steps:
        assert at <= s["estimate_start_ns"] <= end
        at = s["estimate_start_ns"]
    [dev] = [e for e in events if e.get("cat") == "kernel" and e["name"] == program["name"]]
    assert dev["args"]["category"] == "program"
    assert dev["args"]["program"] == program["name"]


def test_collectives_carry_their_group_and_peers(tmp_path):
    results = run_ranks(
        str(Path(__file__).parent / "dist_jobs" / "profiling_worker.py"),
        2,
        timeout=120,
        args=(str(tmp_path),),
    )
    outs = check_all_ok(results)
    assert not segments_created_by(results)
    for rank, out in enumerate(outs):
        [line] = [ln for ln in out.splitlines() if ln.startswith("ITEMS ")]
        items = json.loads(line[len("ITEMS ") :])
        colls = [it for it in items if it["category"] == "collective"]
        assert [detail(c)["op"] for c in colls] == [
            "all_reduce",
            "all_reduce",
            "broadcast",
            "send" if rank == 0 else "recv",
            "all_gather",
            "reduce_scatter",
            "batch_isend_irecv",
            *(["all_reduce"] if rank == 1 else []),
        ]
        ar = detail(colls[0])
        assert ar == {
            "op": "all_reduce",
            "group": "0",
            "size": str(1024 * 4),
            "ranks": "2",
            "rank": str(rank),
            "group_rank": str(rank),
            "peers": str(1 - rank),
            "seq": ar["seq"],
            "dtype": "float32",
            "reduce_op": "sum",
        }
        # Sequence numbers in the group, one per collective.
        first = int(ar["seq"])
        assert [int(detail(c)["seq"]) for c in colls[:7]] == list(range(first, first + 7))
        assert detail(colls[1])["reduce_op"] == "max"
        assert detail(colls[2])["root"] == "0"
        p2p = detail(colls[3])
        assert (p2p["peers"], p2p["size"], p2p["dtype"]) == (str(1 - rank), "512", "bfloat16")
        # The gathered result; the scattered input; what the batch sends and receives.
        assert detail(colls[4])["size"] == str(2 * 1024 * 4)
        assert detail(colls[5])["size"] == str(1024 * 4)
        assert "reduce_op" in detail(colls[5]) and "reduce_op" not in detail(colls[4])
        batch = detail(colls[6])
        assert (batch["peers"], batch["size"]) == (str(1 - rank), str(2 * 8 * 8))
        for c in colls:
            assert c["bytes"] == int(detail(c)["size"]) and c["estimate_ns"] > 0
            assert c["correlation"] > 0  # the c10d op that queued it
        # An all-reduce of 2 ranks costs more than a broadcast of as many bytes.
        assert colls[0]["estimate_ns"] > colls[2]["estimate_ns"]
        if rank == 1:  # the sub-group of rank 1 alone: group rank 0, no peers
            sub = detail(colls[7])
            assert (sub["group_rank"], sub["rank"], sub["ranks"], sub["peers"]) == (
                "0",
                "1",
                "1",
                "",
            )
            assert sub["group"] != "0" and sub["seq"] == "1"

        trace = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert trace["distributedInfo"]["rank"] == rank
        assert trace["distributedInfo"]["world_size"] == 2
        dev = [
            e
            for e in trace["traceEvents"]
            if e.get("cat") == "kernel" and e["name"] == "c10d::allreduce"
        ]
        assert len(dev) == 2 + (rank == 1)
        assert dev[0]["args"]["op"] == "all_reduce" and dev[0]["args"]["peers"] == str(1 - rank)


def test_a_host_fallback_is_estimated_as_a_round_trip_to_the_host():
    # TorchNeuron runs the linear-algebra decompositions on the host: on a Trainium
    # the operands go to the host, it computes, the results come back and the device
    # waits. The estimate is that round trip plus the host's compute, which is this
    # item's own run time (the op runs on this host's CPU here as there).
    a = torch.randn(128, 96, device="neuron")
    torch.linalg.qr(a)  # the first call's checks outside the profile
    items, _ = profiled(lambda: torch.linalg.qr(a))
    (qr,) = [i for i in items if i["name"] == "aten::linalg_qr"]
    assert detail(qr) == {"fallback": "host"}
    measured = qr["end_ns"] - qr["start_ns"]
    assert qr["estimate_compute_ns"] == measured
    # Its tensors: A, then Q (128 x 96) and R (96 x 96).
    trip = torch_neuronx._C._estimate_op(
        "aten::linalg_qr", [[128, 96], [128, 96], [96, 96]], [4, 4, 4]
    )
    assert trip["fallback"] == "host" and trip["engine"] == "host"
    assert trip["compute_ns"] == 0  # the host's compute is known only when it ran
    assert qr["estimate_dma_ns"] == pytest.approx(trip["dma_ns"])
    assert qr["estimate_latency_ns"] == pytest.approx(trip["latency_ns"])
    assert qr["estimate_ns"] == round(measured + trip["dma_ns"] + trip["latency_ns"])
    # The round trip costs more than the same bytes as one device op moves.
    as_device_op = torch_neuronx._C._estimate_op(
        "aten::mm", [[128, 96], [128, 96], [96, 96]], [4, 4, 4]
    )
    assert trip["latency_ns"] > as_device_op["latency_ns"]
