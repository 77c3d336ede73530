"""torch_neuronx.profiling's tables, summary and trace merge, and the profiling example.

The tables are checked against the profile they come from (device events of
prof.events(), host ops by correlation id, roofline estimates from the Trainium
model's constants); the summary's bound classification on a large matmul, a large
add and a tiny add; the merge on two synthetic per-rank traces; the example as a
subprocess with tiny sizes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function

import torch_neuronx
import torch_neuronx.profiling.merge as merge
import torch_neuronx.profiling.summary as summary
import torch_neuronx.profiling.tables as tables

ACTS = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
REPO = Path(__file__).resolve().parents[1]


def _device_events(prof):
    return [ev for ev in prof.events() if ev.device_type.name not in ("CPU", "CUDA")]


def _profile_small(n=256, **kw):
    a = torch.randn(n, n, device="neuron")
    b = torch.randn(n, n, device="neuron")
    torch.neuron.synchronize()
    with profile(activities=ACTS, **kw) as prof:
        with record_function("block"):
            c = a @ b
            d = c + a
            e = d.cpu()
    return prof, e


@pytest.fixture(scope="module")
def small():
    prof, _ = _profile_small(record_shapes=True, with_flops=True, profile_memory=True)
    return prof


def test_device_items_are_the_profiles_device_events(small):
    items = tables.device_items(small)
    events = _device_events(small)
    top = items[items["parent"] < 0]
    assert len(top) == len(events) == 3
    assert sorted(top["name"]) == sorted(ev.name for ev in events)
    assert sorted(top["correlation"]) == sorted(int(ev.id) for ev in events)
    # Same start as the profile's event, on the profile's time base.
    by_corr = {int(ev.id): ev for ev in events}
    for row in top.itertuples():
        assert row.start_us == pytest.approx(by_corr[row.correlation].time_range.start, abs=0.01)
        assert row.duration_ns == row.end_ns - row.start_ns > 0
    # Every field of _C._profiler_items() is a column.
    assert set(tables.ITEM_FIELDS) <= set(items.columns)


def test_correlation_gives_the_host_op(small):
    items = tables.device_items(small).set_index("name")
    assert items.loc["aten::mm", "host_op"] == "aten::mm"
    assert items.loc["aten::add.Tensor", "host_op"] == "aten::add"
    assert items.loc["copy_device_to_host", "host_op"] == "aten::copy_"
    ops = tables.ops(small).set_index("correlation")
    for name in ("aten::mm", "aten::add.Tensor", "copy_device_to_host"):
        corr = items.loc[name, "host_correlation"]
        assert ops.loc[corr, "name"] == items.loc[name, "host_op"]


def test_mm_estimate_is_the_model(small):
    target = torch_neuronx._C._profiler_target()
    mm = tables.device_items(small).set_index("name").loc["aten::mm"]
    n = 256
    assert mm["flops"] == 2 * n**3
    assert mm["bytes"] == 3 * n * n * 4
    assert mm["estimate_ns"] > 0
    # The model's parts explain the total; whole 128 x 128 tiles run at the peak.
    parts = {p: mm[f"estimate_{p}_ns"] for p in ("compute", "dma", "latency", "overlap")}
    assert mm["estimate_ns"] == pytest.approx(
        parts["compute"] + parts["dma"] + parts["latency"] - parts["overlap"], abs=1
    )
    assert parts["compute"] == pytest.approx(mm["flops"] / target["tensor_fp32_flops_per_ns"])
    assert parts["dma"] >= mm["bytes"] / target["hbm_bytes_per_ns"]
    assert parts["latency"] == target["fixed_ns"]
    # What _C._estimate_op gives for the same tensors (self, mat2, result).
    want = torch_neuronx._C._estimate_op("aten::mm", [[n, n]] * 3, [4] * 3)
    assert mm["estimate_ns"] == want["estimate_ns"]
    assert parts["dma"] == pytest.approx(want["dma_ns"])


def test_ops_table(small):
    ops = tables.ops(small)
    assert ops["correlation"].is_unique
    assert "neuron_queue_item" not in set(ops["name"])
    mm = ops[ops["name"] == "aten::mm"].iloc[0]
    assert mm["input_shapes"] == "[[256, 256], [256, 256]]"
    assert mm["flops"] == 2 * 256**3
    assert mm["end_us"] > mm["start_us"]
    block = ops[ops["name"] == "block"].iloc[0]
    assert block["is_user_annotation"]
    # matmul -> mm: the parent column follows the nesting.
    matmul = ops[ops["name"] == "aten::matmul"].iloc[0]
    assert mm["parent"] == matmul["correlation"]
    assert matmul["parent"] == block["correlation"]


def test_memory_events(small):
    mem = tables.memory_events(small)
    # The .cpu() result: an allocation of 256*256 floats on the CPU.
    cpu = mem[(mem["device_type"] == "cpu") & (mem["bytes"] == 256 * 256 * 4)]
    assert len(cpu) >= 1
    assert (cpu["total_allocated"] >= cpu["bytes"]).all()


def test_export_parquet_round_trip(small, tmp_path):
    paths = tables.export_parquet(small, tmp_path / "tables")
    assert set(paths) == {"ops", "device_items", "memory_events", "collectives"}
    items = pd.read_parquet(paths["device_items"])
    expected = tables.device_items(small)
    assert list(items.columns) == list(expected.columns)
    assert items["name"].tolist() == expected["name"].tolist()
    assert items["estimate_ns"].tolist() == expected["estimate_ns"].tolist()
    ops = pd.read_parquet(paths["ops"])
    assert len(ops) == len(tables.ops(small))
    assert len(pd.read_parquet(paths["collectives"])) == 0


def test_export_to_a_bad_directory_names_it(small, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(OSError, match=re.escape(str(blocker / "sub"))):
        tables.export_parquet(small, blocker / "sub")
    # The profile is still usable.
    paths = tables.export_parquet(small, tmp_path / "ok")
    assert len(pd.read_parquet(paths["device_items"])) == 3


def test_items_of_an_earlier_profile_are_rebuilt():
    first, _ = _profile_small(64)
    second, _ = _profile_small(64)
    assert len(tables.device_items(second)) == 3  # the runtime's list: second's
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        items = tables.device_items(first)
    assert any("not this profile's" in str(w.message) for w in caught)
    events = _device_events(first)
    assert sorted(zip(items["name"], items["correlation"], strict=True)) == sorted(
        (ev.name, int(ev.id)) for ev in events
    )
    # Stream, seq and category come from the profile's own trace.
    copy = items.set_index("name").loc["copy_device_to_host"]
    assert copy["category"] == "copy"
    assert copy["estimate_ns"] > 0
    assert items["seq"].is_unique


def test_parse_detail():
    assert tables.parse_detail("op=all_reduce;group=0;size=4096;ratio=0.5;peers=") == {
        "op": "all_reduce",
        "group": 0,
        "size": 4096,
        "ratio": 0.5,
        "peers": "",
    }
    assert tables.parse_detail("") == {}
    assert tables.parse_detail("novalue;k=v;") == {"k": "v"}


def test_collective_columns_from_synthetic_items():
    items = pd.DataFrame(
        {
            "name": ["c10d::allreduce_", "aten::mm", "c10d::allgather_"],
            "category": ["collective", "compute", "collective"],
            "seq": [7, 8, 9],
            "detail": [
                "op=all_reduce;group=0;size=4096;ranks=4;seq=3;peers=1,3",
                "",
                "op=all_gather;group=1;size=512;ranks=2;seq=4",
            ],
        }
    )
    coll = tables.collectives_from_items(items)
    assert coll["name"].tolist() == ["c10d::allreduce_", "c10d::allgather_"]
    assert coll["group"].tolist() == [0, 1]
    assert coll["size"].tolist() == [4096, 512]
    assert coll["ranks"].tolist() == [4, 2]
    # The detail's seq does not overwrite the item's.
    assert coll["seq"].tolist() == [7, 9]
    assert coll["detail_seq"].tolist() == [3, 4]
    assert coll["peers"].tolist()[0] == "1,3"
    assert pd.isna(coll["peers"].tolist()[1])


def test_collective_of_a_one_process_group():
    dist.init_process_group("neuron", rank=0, world_size=1, store=dist.HashStore())
    try:
        t = torch.ones(1024, device="neuron")
        dist.all_reduce(t)
        torch.neuron.synchronize()
        with profile(activities=ACTS) as prof:
            dist.all_reduce(t)
            torch.neuron.synchronize()
    finally:
        dist.destroy_process_group()
    coll = tables.collectives(prof)
    assert len(coll) == 1
    row = coll.iloc[0]
    assert row["op"] == "all_reduce"
    assert row["size"] == 4096
    assert row["ranks"] == 1
    assert row["host_op"].startswith("c10d::allreduce")
    assert row["estimate_ns"] > 0


def test_bound_classification():
    big = torch.randn(1024, 1024, device="neuron")
    vec = torch.randn(4 * 1024 * 1024, device="neuron")
    tiny = torch.randn(16, device="neuron")
    torch.neuron.synchronize()
    with profile(activities=ACTS) as prof:
        big @ big
        vec + vec
        tiny * tiny
    s = summary.step_summary(prof)
    bound = {r["name"]: r["bound"] for r in s["top"]}
    assert bound["aten::mm"] == "compute"
    assert bound["aten::add.Tensor"] == "memory"
    assert bound["aten::mul.Tensor"] == "latency"

    items = tables.device_items(prof)
    t = s["target"]
    assert s["items"] == len(items) == 3
    assert s["estimated_ns"] == items["estimate_ns"].sum()
    assert s["measured_ns"] == items["duration_ns"].sum()
    assert s["flops"] == items["flops"].sum()
    assert s["mfu"] == pytest.approx(
        s["flops"] / (t["tensor_bf16_flops_per_ns"] * s["estimated_busy_ns"])
    )
    assert 0 < s["mfu"] < 1
    # The parts: the matmul's compute is flops over the fp32 peak.
    costs = summary.item_costs(items).set_index("name")
    assert costs.loc["aten::mm", "engine"] == "tensor_fp32"
    assert costs.loc["aten::mm", "compute_ns"] == pytest.approx(
        2 * 1024**3 / t["tensor_fp32_flops_per_ns"]
    )
    # The add's DMA: its bytes at the HBM bandwidth, at the efficiency of 128 KiB
    # per partition (99.6%).
    assert costs.loc["aten::add.Tensor", "memory_ns"] == pytest.approx(
        3 * vec.numel() * 4 / t["hbm_bytes_per_ns"], rel=0.01
    )
    assert costs.loc["aten::add.Tensor", "memory_ns"] > 3 * vec.numel() * 4 / t["hbm_bytes_per_ns"]
    # The parts are the estimate's.
    for row in costs.itertuples():
        assert row.compute_ns + row.memory_ns + row.network_ns + row.fixed_ns - row.overlap_ns == (
            pytest.approx(row.estimate_ns, abs=1)
        )
    text = summary.format_summary(s)
    assert "estimated MFU" in text and "aten::mm" in text


def test_items_carry_the_engine_their_estimate_used():
    # The host's description of each item, as fields (not re-derived from names).
    a = torch.randn(256, 256, device="neuron")
    b = a.to(torch.bfloat16)
    torch.neuron.synchronize()
    with profile(activities=ACTS) as prof:
        a @ a
        b @ b
        a + a
        torch.neuron.synchronize()
    items = tables.device_items(prof)
    mm = items[items["name"] == "aten::mm"]
    assert sorted(zip(mm["engine"], mm["element_bytes"], strict=True)) == [
        ("tensor_bf16", 2),
        ("tensor_fp32", 4),
    ]
    add = items[items["name"] == "aten::add.Tensor"].iloc[0]
    assert (add["engine"], add["element_bytes"]) == ("vector", 4)
    assert (items["adaptive_sequence"] == 0).all()
    t = summary.target()
    costs = summary.item_costs(items)
    for row in costs[costs["name"] == "aten::mm"].itertuples():
        assert row.compute_ns == pytest.approx(row.flops / t[f"{row.engine}_flops_per_ns"])


def test_key_averages_and_table(small):
    ka = summary.key_averages(small).set_index("name")
    items = tables.device_items(small).set_index("name")
    mm_est_us = items.loc["aten::mm", "estimate_ns"] / 1e3
    assert ka.loc["aten::mm", "self_estimated_trainium_time_total"] == pytest.approx(mm_est_us)
    # Inclusive, as device_time_total: matmul and the block contain the mm.
    assert ka.loc["aten::matmul", "estimated_trainium_time_total"] == pytest.approx(mm_est_us)
    total_us = items["estimate_ns"].clip(lower=0).sum() / 1e3
    assert ka.loc["block", "estimated_trainium_time_total"] == pytest.approx(total_us)
    assert ka.loc["aten::mm", "device_time_total"] == pytest.approx(
        items.loc["aten::mm", "duration_ns"] / 1e3, rel=1e-3
    )
    text = summary.table(small, sort_by="self_cpu_time_total", row_limit=3)
    lines = text.splitlines()
    assert "Est. trn2 total" in lines[1] and "Self CPU" in lines[1]
    assert len(lines) == 3 + 3 + 1
    with pytest.raises(ValueError, match="sort_by"):
        summary.table(small, sort_by="nope")


def _rank_trace(base_ns, pid, rank=None):
    trace = {
        "schemaVersion": 1,
        "baseTimeNanoseconds": base_ns,
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "neuron:0"}},
            {"ph": "M", "name": "process_sort_index", "pid": 0, "tid": 0,
             "args": {"sort_index": 0}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": pid,
             "ts": 100.0, "dur": 10.0},
            {"ph": "X", "cat": "kernel", "name": "aten::mm", "pid": 0, "tid": 0,
             "ts": 105.0, "dur": 20.0},
            {"ph": "s", "cat": "ac2g", "id": 5, "pid": pid, "tid": pid, "ts": 101.0},
            {"ph": "f", "cat": "ac2g", "id": 5, "pid": 0, "tid": 0, "ts": 105.0, "bp": "e"},
            {"ph": "M", "name": "process_sort_index", "pid": "Spans", "tid": 0,
             "args": {"sort_index": 1}},
        ],
    }  # fmt: skip
    if rank is not None:
        trace["distributedInfo"] = {"backend": "neuron", "rank": rank, "world_size": 2}
    return trace


def test_merge_two_ranks(tmp_path):
    # Rank 1's file says rank 1 in distributedInfo (its name says 7); rank 0's only
    # in its name. Rank 1's clock base is 1 ms later.
    p0 = tmp_path / "trace_rank0.json"
    p1 = tmp_path / "worker_rank7.json"
    p0.write_text(json.dumps(_rank_trace(1_000_000_000, 4242)))
    p1.write_text(json.dumps(_rank_trace(1_001_000_000, 4242, rank=1)))
    out = merge.merge_traces([p0, p1], tmp_path / "merged.json")
    merged = json.loads(out.read_text())
    assert merged["baseTimeNanoseconds"] == 1_000_000_000
    assert [i["rank"] for i in merged["distributedInfo"]] == [0, 1]
    ev = merged["traceEvents"]
    names = {(e["pid"], e["args"]["name"]) for e in ev if e.get("name") == "process_name"}
    stride = merge.PID_STRIDE
    assert {
        (4242, "rank 0 python"),
        (0, "rank 0 neuron:0"),
        (stride + 4242, "rank 1 python"),
        (stride + 0, "rank 1 neuron:0"),
        ("rank 0 Spans", "rank 0 pid rank 0 Spans"),
        ("rank 1 Spans", "rank 1 pid rank 1 Spans"),
    } <= names
    kernels = sorted((e["pid"], e["ts"]) for e in ev if e.get("cat") == "kernel")
    # Rank 1's events move by the 1 ms between the bases.
    assert kernels == [(0, 105.0), (stride, 1105.0)]
    flows = {(e["pid"], e["id"]) for e in ev if e.get("ph") in ("s", "f")}
    assert flows == {
        (4242, 5),
        (0, 5),
        (stride + 4242, merge.FLOW_ID_STRIDE + 5),
        (stride, merge.FLOW_ID_STRIDE + 5),
    }
    sort = {e["pid"]: e["args"]["sort_index"] for e in ev if e.get("name") == "process_sort_index"}
    assert sort[0] < sort[stride]

    with pytest.raises(ValueError, match="both rank 0"):
        merge.merge_traces([p0, p0], tmp_path / "dup.json")
    # Explicit ranks win; a .gz output is compressed.
    gz = merge.merge_traces([p0, p1], tmp_path / "m.json.gz", ranks=[3, 4])
    assert merge.load_trace(gz)["distributedInfo"][0]["rank"] == 3


def test_merge_real_trace(small, tmp_path):
    path = tmp_path / "rank0.json"
    small.export_chrome_trace(str(path))
    out = merge.merge_traces([path, path], tmp_path / "m.json", ranks=[0, 1])
    merged = json.loads(out.read_text())
    one = json.loads(path.read_text())
    assert len(merged["traceEvents"]) >= 2 * len(one["traceEvents"])
    devices = {e["pid"] for e in merged["traceEvents"] if e.get("cat") == "kernel"}
    assert devices == {0, merge.PID_STRIDE}


def test_profile_gpt_example(tmp_path):
    png = tmp_path / "timeline.png"
    cmd = [
        sys.executable,
        str(REPO / "examples" / "profiling" / "profile_gpt.py"),
        "--out", str(png),
        "--tables", str(tmp_path / "tables"),
        "--n-layer", "1",
        "--d-model", "32",
        "--n-head", "2",
        "--seq-len", "16",
        "--batch", "2",
        "--wait", "0",
        "--warmup", "1",
        "--active", "1",
    ]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    for section in (
        "== top device items",
        "== per-layer breakdown",
        "== step summary ==",
        "estimated MFU",
        "== timeline ==",
    ):
        assert section in r.stdout, r.stdout
    assert "block 0" in r.stdout and "optimizer" in r.stdout
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000
    assert len(pd.read_parquet(tmp_path / "tables" / "device_items.parquet")) > 0
