"""The estimate model's bindings: ``_C._estimate_op`` and ``_C._estimate_collective``.

Each must give what the profiler records for the same work in a real run (one C++
function behind both), with parts that explain the total
(estimate = compute + dma + latency - overlap), and reject bad input with a
ValueError that says what is wrong.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from dist_jobs.launch import check_all_ok, run_ranks
from torch.profiler import ProfilerActivity, profile

import torch_neuronx
import torch_neuronx.profiling.tables as tables

_C = torch_neuronx._C
ACTS = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
PARTS = ("compute_ns", "dma_ns", "latency_ns", "overlap_ns")
KEYS = {"estimate_ns", *PARTS, "flops", "bytes", "tensor_engine", "engine"}


def _spec(*tensors):
    """sizes and itemsizes of tensors, in the order the eager path records them."""
    return [list(t.shape) for t in tensors], [t.element_size() for t in tensors]


def _check_parts(d):
    assert set(d) == KEYS
    assert all(d[p] >= 0 for p in PARTS)
    assert d["overlap_ns"] <= min(d["compute_ns"], d["dma_ns"]) + 1e-9
    total = d["compute_ns"] + d["dma_ns"] + d["latency_ns"] - d["overlap_ns"]
    assert d["estimate_ns"] == round(total)


@pytest.fixture(scope="module")
def run():
    """A few eager ops under the profiler, with their tensors in recording order."""
    torch.manual_seed(0)
    a = torch.randn(192, 320, device="neuron")
    b = torch.randn(320, 72, device="neuron")
    ab, bb = a.bfloat16(), b.bfloat16()
    x = torch.randn(1000, 37, device="neuron")
    dst = torch.empty_like(x)
    torch.neuron.synchronize()
    with profile(activities=ACTS) as prof:
        mm = a @ b  # aten::mm: [self, mat2, out]
        mm_bf16 = ab @ bb
        added = x + x  # aten::add.Tensor: [self, other, out] (alpha: a scalar)
        total = x.sum(dim=0)  # aten::sum.dim_IntList: [self, out]
        dst.copy_(x)  # aten::copy_ on one device: [dst, src]
        torch.neuron.synchronize()
    expected = [
        ("aten::mm", _spec(a, b, mm)),
        ("aten::mm", _spec(ab, bb, mm_bf16)),
        ("aten::add.Tensor", _spec(x, x, added)),
        ("aten::sum.dim_IntList", _spec(x, total)),
        ("aten::copy_", _spec(dst, x)),
    ]
    items = tables.device_items(prof)
    return items[items["parent"] < 0].reset_index(drop=True), expected


def test_binding_equals_the_recorded_estimate(run):
    items, expected = run
    assert items["name"].tolist() == [name for name, _ in expected]
    for row, (name, (sizes, itemsizes)) in zip(items.itertuples(), expected, strict=True):
        d = _C._estimate_op(name, sizes, itemsizes)
        _check_parts(d)
        assert d["estimate_ns"] == row.estimate_ns, name
        assert d["flops"] == row.flops and d["bytes"] == row.bytes, name
        assert d["engine"] == row.engine, name
        for p in PARTS:
            assert getattr(row, f"estimate_{p}") == pytest.approx(d[p], rel=1e-12, abs=1e-9)


def test_engines_and_flops(run):
    _, expected = run
    mm32 = _C._estimate_op(expected[0][0], *expected[0][1])
    mm16 = _C._estimate_op(expected[1][0], *expected[1][1])
    assert mm32["tensor_engine"] and mm32["engine"] == "tensor_fp32"
    assert mm16["engine"] == "tensor_bf16"
    assert mm32["flops"] == mm16["flops"] == 2 * 192 * 320 * 72
    assert mm32["compute_ns"] > mm16["compute_ns"]
    add = _C._estimate_op(expected[2][0], *expected[2][1])
    assert add["engine"] == "vector" and not add["tensor_engine"]
    assert add["flops"] == 1000 * 37 and add["bytes"] == 3 * 1000 * 37 * 4
    copy = _C._estimate_op(expected[4][0], *expected[4][1])
    assert copy["engine"] == "" and copy["flops"] == 0 and copy["compute_ns"] == 0


def test_undefined_and_scalar_entries_count_for_nothing():
    a, b, c = [64, 128], [128, 32], [64, 32]
    plain = _C._estimate_op("aten::mm", [a, b, c], [2, 2, 2])
    # An itemsize-0 entry (an undefined tensor, a CPU scalar) adds no bytes, and
    # its sizes are ignored.
    extra = _C._estimate_op("aten::mm", [a, b, c, [4096, 4096]], [2, 2, 2, 0])
    assert extra == plain
    # addmm: self (the bias) first, then the two operands.
    addmm = _C._estimate_op("aten::addmm", [[32], a, b, c], [2, 2, 2, 2])
    assert addmm["flops"] == plain["flops"]


def test_target_and_lnc():
    sizes, itemsizes = [[1024, 1024]] * 3, [2, 2, 2]
    trn2 = _C._estimate_op("aten::mm", sizes, itemsizes, target="trn2", lnc=1)
    trn2_lnc2 = _C._estimate_op("aten::mm", sizes, itemsizes, target="trn2", lnc=2)
    trn1 = _C._estimate_op("aten::mm", sizes, itemsizes, target="trn1")
    assert trn2_lnc2["compute_ns"] == pytest.approx(trn2["compute_ns"] / 2)
    # A NeuronCore-v2 clocks its PE array faster than a v3 (2.8 vs 2.4 GHz).
    assert trn1["compute_ns"] < trn2["compute_ns"]
    # "" and 0: the selected target and the device's logical core, as the profiler.
    selected = _C._profiler_target()
    here = _C._estimate_op("aten::mm", sizes, itemsizes)
    same = _C._estimate_op(
        "aten::mm",
        sizes,
        itemsizes,
        target=selected["name"],
        lnc=selected["physical_cores_per_device"],
    )
    assert here == same


def test_collective_parts_and_growth():
    one = _C._estimate_collective("allreduce", 1 << 20, [0])
    _check_parts(one)
    two = _C._estimate_collective("allreduce", 1 << 20, [0, 1])
    eight = _C._estimate_collective("allreduce", 1 << 20, list(range(8)))
    _check_parts(eight)
    assert one["estimate_ns"] < two["estimate_ns"] < eight["estimate_ns"]
    assert eight["compute_ns"] == 0 and eight["engine"] == ""
    gather = _C._estimate_collective("allgather", 1 << 24, list(range(8)))
    reduce_all = _C._estimate_collective("allreduce", 1 << 24, list(range(8)))
    assert reduce_all["estimate_ns"] > gather["estimate_ns"]
    for kind in ("allreduce", "allgather", "reducescatter", "alltoall"):
        for kwargs in ({}, {"target": "trn1"}, {"target": "trn3", "lnc": 1}):
            _check_parts(_C._estimate_collective(kind, 1 << 22, list(range(64)), **kwargs))
    for kind in ("broadcast", "reduce", "p2p", "barrier"):
        _check_parts(_C._estimate_collective(kind, 4096, [0, 1]))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: _C._estimate_op("aten::mm", [[2, 2]], [4, 4]), "1 sizes but 2 itemsizes"),
        (lambda: _C._estimate_op("aten::add", [[-1, 2]], [4]), "negative size"),
        (lambda: _C._estimate_op("aten::add", [[1, 2]], [-4]), "negative itemsize"),
        (lambda: _C._estimate_op("aten::add", [[1]], [4], target="trn9"), "unknown target"),
        (lambda: _C._estimate_op("aten::add", [[1]], [4], target="trn1", lnc=2), "no logical"),
        (lambda: _C._estimate_op("aten::add", [[1]], [4], lnc=-1), "lnc"),
        (lambda: _C._estimate_op("aten::add", [[1]], [4], target="trn2", lnc=3), "divide"),
        (lambda: _C._estimate_collective("allsum", 4, [0, 1]), "unknown collective"),
        (lambda: _C._estimate_collective("allreduce", -4, [0, 1]), "bytes"),
        (lambda: _C._estimate_collective("allreduce", 4, []), "no ranks"),
        (lambda: _C._estimate_collective("allreduce", 4, [0, -1]), "negative rank"),
        (lambda: _C._estimate_collective("allreduce", 4, [0], ranks_per_chip=-1), "ranks_per"),
        (lambda: _C._estimate_collective("allreduce", 4, [0], target="x"), "unknown target"),
    ],
)
def test_bad_input_raises_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


_KIND = {
    "all_reduce": "allreduce",
    "broadcast": "broadcast",
    "send": "p2p",
    "recv": "p2p",
    "batch_isend_irecv": "p2p",
    "all_gather": "allgather",
    "reduce_scatter": "reducescatter",
}


def test_collective_binding_equals_a_real_run(tmp_path):
    """Two ranks' collectives (the profiling worker's), each item's estimate equal to
    the binding's over its group's global ranks."""
    results = run_ranks(
        str(Path(__file__).parent / "dist_jobs" / "profiling_worker.py"),
        2,
        timeout=120,
        args=(str(tmp_path),),
    )
    outs = check_all_ok(results)
    checked = 0
    for out in outs:
        [line] = [ln for ln in out.splitlines() if ln.startswith("ITEMS ")]
        items = json.loads(line[len("ITEMS ") :])
        for it in items:
            if it["category"] != "collective" or it["estimate_ns"] <= 0:
                continue
            detail = tables.parse_detail(it["detail"])
            if detail["op"] not in _KIND:
                continue
            rank, group_rank, n = detail["rank"], detail["group_rank"], detail["ranks"]
            peers = str(detail.get("peers", ""))
            others = [int(p) for p in peers.split(",") if p != ""] if n > 1 else []
            ranks = sorted([rank, *others])
            assert ranks.index(rank) == group_rank or n != len(ranks)
            want = _C._estimate_collective(_KIND[detail["op"]], float(detail["size"]), ranks)
            assert want["estimate_ns"] == it["estimate_ns"], detail
            for p in PARTS:
                got = it[f"estimate_{p}"]
                assert not math.isnan(got) and got == pytest.approx(want[p]), detail
            checked += 1
    assert checked >= 10


def test_parts_in_the_chrome_trace(tmp_path):
    """The estimated track's events carry the parts (us), adding up to their duration;
    the measured item has them as ``estimate <part> us``."""
    a = torch.randn(300, 200, device="neuron")
    torch.neuron.synchronize()
    with profile(activities=ACTS) as prof:
        a @ a.t()
        torch.neuron.synchronize()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    estimated = [e for e in events if e.get("args", {}).get("estimate") and e["name"] == "aten::mm"]
    measured = [e for e in events if "estimate compute us" in e.get("args", {})]
    assert estimated and measured
    args = estimated[0]["args"]
    total = args["compute us"] + args["dma us"] + args["latency us"] - args["overlap us"]
    assert total == pytest.approx(estimated[0]["dur"], abs=0.01)
    m = measured[0]["args"]
    assert m["estimate compute us"] == pytest.approx(args["compute us"])
    # The table rebuilt from a profile's trace alone (when another profile finished
    # since) keeps the parts. (A profile's chrome trace exports its device args
    # once: a second profile.)
    with profile(activities=ACTS) as again:
        a @ a.t()
        torch.neuron.synchronize()
    items = tables._rebuild_items(
        again, tables._device_events(again), tables._trace_start_ns(again)
    )
    [mm] = [it for it in items if it["name"] == "aten::mm"]
    assert mm["estimate_compute_ns"] == pytest.approx(args["compute us"] * 1e3, rel=1e-6)
    assert mm["estimate_overlap_ns"] == pytest.approx(args["overlap us"] * 1e3, rel=1e-6)


def test_model_rules_through_the_binding():
    """The rules as a user sees them: whole PE-array tiles, DMA efficiency rising with
    the transfer, overlap within its bounds (docs/profiling.md "Estimated Trainium
    time")."""

    def mm(m, k, n, itemsize=2):
        return _C._estimate_op("aten::mm", [[m, k], [k, n], [m, n]], [itemsize] * 3, "trn2", 1)

    # A 129-deep contraction costs as a 256-deep one (two tiles of the 128 partitions).
    assert mm(512, 129, 512)["compute_ns"] == pytest.approx(mm(512, 256, 512)["compute_ns"])
    # Full tiles run at the published peak: 79 TFLOPS bf16 per NeuronCore-v3.
    full = mm(1024, 1024, 1024)
    assert full["compute_ns"] == pytest.approx(2 * 1024**3 / 79e3)
    # DMA: bytes per ns rise with the transfer's size, toward the core's bandwidth.
    rates = []
    for n in (16, 256, 4096, 65536, 1 << 20):
        d = _C._estimate_op("aten::neg", [[n], [n]], [4, 4], "trn2", 1)
        rates.append(d["bytes"] / d["dma_ns"])
    assert rates == sorted(rates) and rates[-1] <= 2900 / 8
    # Overlap: none for a one-tile op, nearly the shorter side for a large one.
    small = mm(64, 64, 64)
    assert small["overlap_ns"] == 0
    big = mm(4096, 4096, 4096)
    assert big["overlap_ns"] > 0.99 * min(big["compute_ns"], big["dma_ns"])
    assert big["overlap_ns"] <= min(big["compute_ns"], big["dma_ns"])
    # fp8 on the tensor engine at its own rate.
    fp8 = mm(1024, 1024, 1024, itemsize=1)
    assert fp8["engine"] == "tensor_fp8"
    assert fp8["compute_ns"] == pytest.approx(full["compute_ns"] / 2)


def test_attention_backward_counts_its_five_products():
    # FlashAttention's backward recomputes Q K^T and takes dV, dP, dQ, dK: 2.5x
    # the forward's two products, from grad_out, q, k, v (grad_out first).
    q = k = v = out = [2, 4, 256, 64]
    fwd = _C._estimate_op(
        "aten::_scaled_dot_product_flash_attention_for_cpu", [q, k, v, out], [2] * 4
    )
    bwd = _C._estimate_op(
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
        [out, q, k, v, out, [2, 4, 256], q, k, v],
        [2, 2, 2, 2, 2, 4, 2, 2, 2],
    )
    assert fwd["flops"] == 2 * 2 * 4 * 256 * 256 * (64 + 64)
    assert bwd["flops"] == pytest.approx(2.5 * fwd["flops"])
    assert bwd["engine"] == "tensor_bf16" and bwd["compute_ns"] > 2 * fwd["compute_ns"]
