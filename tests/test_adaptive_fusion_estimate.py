"""Adaptive eager's fused steps in the profiler: one item for the ops a fused pass ran
(category "fused", the ops after it with fused_into), costed as one kernel (one launch,
the group's external HBM traffic), the adaptive item as one pipeline of its steps, and
tables and traces that count the step once."""

import json
import warnings

import pytest
import torch
import torch.nn.functional as F
from device_trace import assert_one_pipeline
from torch.profiler import ProfilerActivity, profile

import torch_neuronx
from torch_neuronx.profiling import summary, tables

N, D = 512, 1024
F32 = 4
CHAIN = ["aten::add.Tensor", "aten::gelu", "aten::add.Tensor", "aten::native_layer_norm"]


pytestmark = pytest.mark.usefixtures("adaptive_eager_defaults")


def _operands():
    gen = torch.Generator().manual_seed(0)
    x, r = (torch.randn(N, D, generator=gen).to("neuron") for _ in range(2))
    b, w, lb = (torch.randn(D, generator=gen).to("neuron") for _ in range(3))
    return x, b, r, w, lb


def _run(calls=6, fuse=True, adaptive=True, hold_sum=False):
    """The chain, one window per call, under the profiler: (prof, items, last result)."""
    x, b, r, w, lb = _operands()
    kept = []

    def call():
        with torch.no_grad():
            if hold_sum:
                t = x + b  # the host keeps it past the call
                kept[:] = [t]
                return F.layer_norm(F.gelu(t) + r, (D,), w, lb)
            return F.layer_norm(F.gelu(x + b) + r, (D,), w, lb)

    torch.neuron.reset_adaptive_eager()
    torch.neuron.set_adaptive_eager(adaptive, fuse=fuse)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        for _ in range(calls):
            y = call()
            torch.neuron.synchronize()
    torch.neuron.set_adaptive_eager(False)
    return prof, torch_neuronx._C._profiler_items(), y.cpu()


def _fused_steps(items):
    """[(row, fused step, [its ops])] of a profile's items."""
    out = []
    for k, it in enumerate(items):
        if it["category"] == "fused":
            out.append((k, it, [i for i in items if i["fused_into"] == k]))
    return out


def _external_bytes(hold_sum=False):
    reads = (N * D + D + N * D + D + D) * F32  # x, b, r, gamma, beta
    # out, mean, rstd; and the layer_norm's argument gelu(x + b) + r: the sequence is
    # released while the call queueing its last op runs, when the host still holds
    # that argument. x + b and gelu(x + b) were dropped by then: they stay on chip.
    writes = (N * D + N + N + N * D) * F32
    if hold_sum:
        writes += N * D * F32  # x + b, kept by the host
    return reads + writes


def test_fused_step_is_one_kernel_of_the_groups_traffic():
    _, items, _ = _run()
    fused = _fused_steps(items)
    assert fused, [i["name"] for i in items]
    t = torch_neuronx._C._profiler_target()
    for k, step, ops in fused:
        assert [o["name"] for o in ops] == CHAIN
        # The ops follow the step, children of the same adaptive item.
        assert ops == items[k + 1 : k + 1 + len(ops)]
        adaptive = items[step["parent"]]
        assert adaptive["name"] == f"adaptive {CHAIN[0]} .. {CHAIN[-1]}"
        assert adaptive["adaptive_sequence"] != 0
        assert all(o["parent"] == step["parent"] for o in ops)
        assert step["name"] == f"fused {CHAIN[0]} .. {CHAIN[-1]}"
        # Below what the ops cost one by one: one launch, no round trips of the
        # temporaries through HBM.
        alone = sum(o["estimate_ns"] for o in ops)
        assert all(o["estimate_ns"] > 0 for o in ops)
        assert 0 < step["estimate_ns"] < alone
        assert step["estimate_ns"] < 0.7 * alone
        # Its traffic: what the group reads from outside and writes that the host holds.
        assert step["bytes"] == _external_bytes()
        assert step["bytes"] < sum(o["bytes"] for o in ops)
        assert step["flops"] == pytest.approx(sum(o["flops"] for o in ops))
        # One launch and one DMA start, as one eager op pays.
        assert step["estimate_latency_ns"] == t["launch_ns"] + t["dma_start_ns"]
        assert all(o["estimate_latency_ns"] == step["estimate_latency_ns"] for o in ops)
        assert step["estimate_ns"] == pytest.approx(
            step["estimate_compute_ns"]
            + step["estimate_dma_ns"]
            + step["estimate_latency_ns"]
            - step["estimate_overlap_ns"],
            abs=1,
        )
        assert step["estimate_dma_ns"] < sum(o["estimate_dma_ns"] for o in ops)
        # The ops share the step's measured span, one after another, in proportion to
        # their estimates alone; the same inside its estimated span.
        assert ops[0]["start_ns"] == step["start_ns"] and ops[-1]["end_ns"] == step["end_ns"]
        span = step["end_ns"] - step["start_ns"]
        for a, b in zip(ops, ops[1:], strict=False):
            assert a["end_ns"] == b["start_ns"]
            assert a["estimate_start_ns"] < b["estimate_start_ns"]
        for o in ops:
            want = span * o["estimate_ns"] / alone
            assert o["end_ns"] - o["start_ns"] == pytest.approx(want, abs=2)
        assert ops[0]["estimate_start_ns"] == step["estimate_start_ns"]
        assert ops[-1]["estimate_start_ns"] < step["estimate_start_ns"] + step["estimate_ns"]


def test_a_temporary_the_host_keeps_is_written_back():
    _, items, _ = _run(hold_sum=True)
    fused = _fused_steps(items)
    assert fused
    for _, step, ops in fused:
        assert [o["name"] for o in ops] == CHAIN
        assert step["bytes"] == _external_bytes(hold_sum=True)


def test_adaptive_item_is_one_pipeline_of_its_steps():
    _, items, _ = _run()
    adapted = [(k, i) for k, i in enumerate(items) if i["parent"] < 0 and i["adaptive_sequence"]]
    assert adapted
    for k, item in adapted:
        children = [i for i in items if i["parent"] == k]
        steps = [i for i in children if i["fused_into"] < 0]
        assert [s["category"] for s in steps] == ["fused"]  # the chain is one step
        # Not its first op's estimate: its steps' compute and DMA, overlapped as far
        # as the shorter, one launch and one DMA start.
        assert_one_pipeline(item, steps)
        assert 0 < item["estimate_ns"] <= sum(s["estimate_ns"] for s in steps)
        assert item["estimate_ns"] != children[1]["estimate_ns"]  # not its first op's
        # Its steps inside its estimated span.
        for s in steps:
            assert item["estimate_start_ns"] <= s["estimate_start_ns"]
            assert s["estimate_start_ns"] <= item["estimate_start_ns"] + item["estimate_ns"]


def test_tables_and_summaries_count_a_fused_step_once():
    prof, items, _ = _run()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the runtime's items, no rebuild
        df = tables.device_items(prof)
    assert df["fused_into"].dtype == "int64"
    fused = df[df["category"] == "fused"]
    assert len(fused)
    inside = df[df["fused_into"] >= 0]
    assert set(inside["fused_into"]) == set(fused.index)
    assert (df.loc[inside["fused_into"], "category"] == "fused").all()
    # The ops have their host op; the step is not one (no correlation of its own).
    assert (inside["host_op"].notna()).all() and (fused["correlation"] == 0).all()

    costs = summary.item_costs(df)
    assert costs.loc[fused.index, "leaf"].all() and not costs.loc[inside.index, "leaf"].any()
    top = df[(df["parent"] < 0) & (df["category"] != "engine")]
    s = summary.step_summary(prof)
    assert s["items"] == len(top)
    assert s["estimated_ns"] == int(top["estimate_ns"].clip(lower=0).sum())
    leaves = costs[costs["leaf"]]
    assert s["bytes"] == pytest.approx(leaves["bytes"].sum())
    # The fused step is its own row of the item summary, counted once per run.
    rows = {r["name"]: r for r in s["top"]}
    frow = rows[f"fused {CHAIN[0]} .. {CHAIN[-1]}"]
    assert frow["count"] == len(fused) and frow["category"] == "fused"
    assert frow["estimated_ns"] == int(fused["estimate_ns"].sum())
    plain_gelu = df[(df["name"] == "aten::gelu") & (df["parent"] < 0)]
    assert rows["aten::gelu"]["count"] == len(plain_gelu)

    # Per host op: each op inside carries its share of the adaptive item's estimate,
    # in proportion to its estimate alone; the shares add up to the top-level total.
    attributed = costs["attributed_ns"]
    assert attributed.sum() == pytest.approx(top["estimate_ns"].clip(lower=0).sum())
    assert (attributed[fused.index] == 0).all()
    for f in fused.index:
        ops = df[df["fused_into"] == f]
        item = df.loc[df.loc[f, "parent"]]
        assert attributed[item.name] == 0
        want = item["estimate_ns"] * ops["estimate_ns"] / ops["estimate_ns"].sum()
        assert attributed[ops.index].to_numpy() == pytest.approx(want.to_numpy())
    ka = summary.key_averages(prof).set_index("name")
    own = ka["self_estimated_trainium_time_total"]
    assert own.sum() == pytest.approx(top["estimate_ns"].clip(lower=0).sum() / 1e3, rel=1e-6)
    gelu_share = sum(
        df.loc[df.loc[f, "parent"], "estimate_ns"]
        * df.loc[f + 2, "estimate_ns"]
        / df[df["fused_into"] == f]["estimate_ns"].sum()
        for f in fused.index
    )
    assert df.loc[fused.index + 2, "name"].eq("aten::gelu").all()
    want_gelu = (plain_gelu["estimate_ns"].sum() + gelu_share) / 1e3
    assert own["aten::gelu"] == pytest.approx(want_gelu, rel=1e-6)


def test_chrome_trace_nests_the_ops_in_the_fused_step(tmp_path):
    prof, items, _ = _run()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    name = f"fused {CHAIN[0]} .. {CHAIN[-1]}"
    measured = [e for e in events if e["name"] == name and e["tid"] == 0]
    estimated = [e for e in events if e["name"] == name and e["tid"] == 1000]
    assert measured and len(measured) == len(estimated)
    assert all(e.get("cat") != "kernel" for e in measured)  # a range, not a kernel
    eps = 1e-3  # us: the trace's rounding
    for track, steps in ((0, measured), (1000, estimated)):
        for step in steps:
            end = step["ts"] + step["dur"]
            inside = sorted(
                (
                    e
                    for e in events
                    if e["tid"] == track
                    and e["args"].get("fused into") == name
                    and step["ts"] - eps <= e["ts"]
                    and e["ts"] + e["dur"] <= end + eps
                ),
                key=lambda e: e["ts"],
            )
            assert [e["name"] for e in inside] == CHAIN
            assert sum(e["dur"] for e in inside) == pytest.approx(step["dur"], abs=4 * eps)
            for a, b in zip(inside, inside[1:], strict=False):
                assert a["ts"] + a["dur"] <= b["ts"] + eps
            if track == 0:
                # The ops are the kernels, each linked to the host op that queued it.
                assert all(e.get("cat") == "kernel" for e in inside)
                assert all(e["args"].get("correlation") for e in inside)
                assert all(e["args"]["fused share us"] > 0 for e in inside)
            else:
                assert all(e["args"]["alone us"] > e["dur"] for e in inside)
    # key_averages counts each op's share of the step's measured time once.
    ka = {e.key: e for e in prof.key_averages()}
    assert ka["aten::gelu"].device_time_total > 0
    assert not any(e.name.startswith("fused ") for e in prof.events())


def test_fuse_off_runs_the_ops_one_by_one_with_the_same_results():
    _, fused_items, fused_out = _run(fuse=True)
    _, items, out = _run(fuse=False)
    _, _, plain = _run(adaptive=False)
    assert _fused_steps(fused_items)
    assert not _fused_steps(items)
    assert all(i["fused_into"] == -1 for i in items)
    assert torch.equal(out, plain) and torch.equal(fused_out, plain)
    adapted = [(k, i) for k, i in enumerate(items) if i["parent"] < 0 and i["adaptive_sequence"]]
    assert adapted
    for k, item in adapted:
        children = [i for i in items if i["parent"] == k]
        assert [c["name"] for c in children] == CHAIN
        assert 0 < item["estimate_ns"] <= sum(c["estimate_ns"] for c in children)
