"""Memory control: storage resize (FSDP2's free and re-grow), the per-process memory
fraction, the CUDA-layout memory summary, and snapshots of live blocks with the op
(and Python stack) that allocated them.

tests/test_memory.py covers the statistics, out-of-memory errors and block reuse.
"""

import gc
import json
import pickle

import pytest
import torch

N = torch.neuron
MIB = 1 << 20


@pytest.fixture(autouse=True)
def _quiet_device():
    gc.collect()
    N.synchronize()
    yield
    N.memory._record_memory_history(enabled=None)
    N.set_stream(N.default_stream())


# --- untyped_storage().resize_() -----------------------------------------------------


def test_fsdp2_free_and_regrow_parameter_storage():
    torch.manual_seed(0)
    lin = torch.nn.Linear(256, 512, bias=False).to("neuron")  # a 512 KiB weight
    p = lin.weight
    src = torch.randn(512, 256)
    nbytes = p.numel() * p.element_size()
    before = N.memory_allocated()

    p.untyped_storage().resize_(0)  # FSDP2 frees the unsharded parameter
    assert p.untyped_storage().size() == 0
    assert before - N.memory_allocated() == nbytes  # at once, as on CUDA

    p.untyped_storage().resize_(p.numel() * p.element_size())  # and re-grows it
    assert p.untyped_storage().size() == nbytes
    assert N.memory_allocated() == before
    with torch.no_grad():
        p.copy_(src)  # the all-gathered values land in the new storage
    torch.testing.assert_close(p.cpu(), src)

    # The module trains on the re-grown parameter like on CPU.
    x = torch.randn(8, 256)
    lin(x.to("neuron")).square().sum().backward()
    ref = torch.nn.Linear(256, 512, bias=False)
    with torch.no_grad():
        ref.weight.copy_(src)
    ref(x).square().sum().backward()
    torch.testing.assert_close(p.grad.cpu(), ref.weight.grad, rtol=1e-4, atol=1e-4)


def test_resize_to_zero_while_queued_work_still_reads_the_storage(busy_fn):
    src = torch.randn(MIB // 4)
    p = src.to("neuron")
    busy_fn(8)
    result = p * 2  # queued behind the busy work: reads p's block later
    before = N.memory_allocated()
    p.untyped_storage().resize_(0)
    assert before - N.memory_allocated() == MIB
    # A new tensor on the same stream may get the freed block; its fill runs
    # after the queued read, so the result is unaffected.
    scribble = torch.full((MIB // 4,), -7.0, device="neuron")
    torch.testing.assert_close(result.cpu(), src * 2)
    assert scribble.cpu().eq(-7).all()


def test_resize_grow_keeps_contents_and_shrink_keeps_prefix():
    t = torch.arange(1000.0, device="neuron")
    s = t.untyped_storage()
    s.resize_(8000)  # grow: the first 1000 floats are kept
    assert s.size() == 8000
    kept = torch.empty(0, device="neuron").set_(s, 0, (1000,), (1,))
    torch.testing.assert_close(kept.cpu(), torch.arange(1000.0))
    s.resize_(400)  # shrink: the first 100 floats are kept
    first = torch.empty(0, device="neuron").set_(s, 0, (100,), (1,))
    torch.testing.assert_close(first.cpu(), torch.arange(100.0))


def test_resize_on_another_stream_holds_the_block_until_that_stream_passes(busy_fn):
    p = torch.ones(MIB // 4, device="neuron")
    side = N.Stream()
    side.wait_stream(N.current_stream())
    with N.stream(side):
        busy_fn(8)
        out = p + 1  # reads p on the side stream, behind the busy work
        p.untyped_storage().resize_(0)  # freed under the side stream
    # Freed (allocated drops) but not reusable until the side stream passed.
    states = [
        b["state"]
        for seg in N.memory_snapshot()
        for b in seg["blocks"]
        if b["state"] == "active_pending_free"
    ]
    assert not side.query(), "the side stream finished too early for the test"
    assert states, "the block was released while the side stream may still read it"
    scribble = torch.zeros(MIB // 4, device="neuron")
    N.current_stream().wait_stream(side)
    assert out.cpu().eq(2).all()
    assert scribble.cpu().eq(0).all()


# --- set_per_process_memory_fraction -------------------------------------------------

FRACTION_SCRIPT = """
import json
import torch
N = torch.neuron
MIB = 1 << 20
r = {"snapshot_before_use": N.memory._snapshot()}
r["default"] = N.get_per_process_memory_fraction()
N.set_per_process_memory_fraction(0.25)  # 16 MiB of 64
r["fraction"] = N.get_per_process_memory_fraction(0)
r["other_device"] = N.get_per_process_memory_fraction(1)
a = torch.ones(8 * MIB, dtype=torch.uint8, device="neuron")
N.memory._record_memory_history()
try:
    torch.empty(12 * MIB, dtype=torch.uint8, device="neuron")
    r["oom"] = None
except torch.OutOfMemoryError as e:
    r["oom"] = str(e)
r["oom_events"] = [e for e in N.memory._snapshot()["device_traces"][0] if e["action"] == "oom"]
N.memory._record_memory_history(enabled=None)
r["other_device_ok"] = torch.ones(24 * MIB, dtype=torch.uint8, device="neuron:1").sum().item()
r["summary_mentions_fraction"] = "fraction: 0.25" in N.memory_summary()
r["a_sum"] = a.sum().item()  # still usable
del a
# The cap counts cached memory too: after freeing, the allocator gives the
# cache back and the same request fits.
b = torch.ones(12 * MIB, dtype=torch.uint8, device="neuron")
r["b_sum"] = b.sum().item()
del b
N.set_per_process_memory_fraction(1.0)
c = torch.ones(40 * MIB, dtype=torch.uint8, device="neuron")
r["c_sum"] = c.sum().item()
print(json.dumps(r))
"""


def test_memory_fraction_caps_allocations(run_py, check):
    env = {"TORCH_NEURONX_HBM_BYTES_PER_CORE": "64MiB"}
    r = json.loads(check(run_py(FRACTION_SCRIPT, env=env, timeout=120)).splitlines()[-1])
    assert r["snapshot_before_use"] == {"segments": [], "device_traces": []}
    assert r["default"] == 1.0
    assert r["fraction"] == 0.25
    assert r["other_device"] == 1.0  # per device
    msg = r["oom"]
    assert msg is not None, "allocating past the fraction limit succeeded"
    assert "neuron:0" in msg and "12.00 MiB" in msg  # the device and the request
    assert "set_per_process_memory_fraction(0.25)" in msg  # the limit, as on CUDA
    assert "16.00 MiB allowed" in msg
    (oom,) = r["oom_events"]  # recorded in the history, as CUDA does
    assert oom["size"] == 12 * MIB and oom["device_free"] > 0
    assert r["other_device_ok"] == 24 * MIB
    assert r["summary_mentions_fraction"]
    assert r["a_sum"] == 8 * MIB
    assert r["b_sum"] == 12 * MIB
    assert r["c_sum"] == 40 * MIB


@pytest.mark.parametrize("fraction", [0.0, 1.5, -1.0, float("nan")])
def test_memory_fraction_out_of_range(fraction):
    with pytest.raises(ValueError, match="Invalid fraction value"):
        N.set_per_process_memory_fraction(fraction)
    assert N.get_per_process_memory_fraction() == 1.0


def test_memory_fraction_bad_type_and_device():
    with pytest.raises(TypeError, match="must be `float`"):
        N.set_per_process_memory_fraction(1)
    with pytest.raises(IndexError, match="Invalid device index neuron:99"):
        N.set_per_process_memory_fraction(0.5, 99)
    with pytest.raises(IndexError, match="Invalid device index"):
        N.get_per_process_memory_fraction(99)
    with pytest.raises(ValueError, match="Expected a neuron device"):
        N.set_per_process_memory_fraction(0.5, "cpu")
    assert N.get_per_process_memory_fraction() == 1.0
    assert (torch.ones(4, device="neuron") + 1).sum().item() == 8


# --- memory_summary ------------------------------------------------------------------


def _row(text, name):
    for line in text.splitlines():
        if line.startswith(f"| {name} "):
            return [c.strip() for c in line.strip("|").split("|")]
    raise AssertionError(f"no row {name!r} in\n{text}")


def test_memory_summary_has_cudas_layout():
    x = torch.empty(3 * MIB, dtype=torch.uint8, device="neuron")
    text = N.memory_summary()
    lines = text.splitlines()
    assert len({len(line) for line in lines}) == 1, "rows of different widths"
    assert all(line.startswith("|") and line.endswith("|") for line in lines)
    assert "PyTorch neuron memory summary, device neuron:0" in text
    for name in (
        "Allocated memory",
        "Active memory",
        "Requested memory",
        "Device reserved memory",
        "Non-releasable memory",
        "Allocations",
        "Active allocs",
        "Device reserved segments",
        "Non-releasable allocs",
        "Oversize allocations",
        "Oversize device segments",
    ):
        assert len(_row(text, name)) == 5, name
    assert text.count("from large pool") == 9 and text.count("from small pool") == 9
    s = N.memory_stats()
    cur = s["allocated_bytes.all.current"]
    # CUDA's units: KiB from 768 KiB on, MiB from 768 MiB on.
    assert 768 * 1024 <= cur < 768 * MIB
    assert _row(text, "Allocated memory")[1] == f"{cur // 1024} KiB"
    assert _row(text, "Allocations")[1] == str(s["allocation.all.current"])
    assert _row(text, "Device reserved segments")[1] == str(s["segment.all.current"])
    short = N.memory_summary(abbreviated=True)
    assert "from large pool" not in short and "Allocated memory" in short
    del x


def _non_releasable_from_snapshot():
    # Free blocks in segments that also hold other blocks, per pool.
    out = {"large_pool": [0, 0], "small_pool": [0, 0]}
    for seg in N.memory_snapshot():
        if seg["device"] != 0 or len(seg["blocks"]) < 2:
            continue
        for b in seg["blocks"]:
            if b["state"] == "inactive":
                out[f"{seg['segment_type']}_pool"][0] += 1
                out[f"{seg['segment_type']}_pool"][1] += b["size"]
    return out


def _check_non_releasable_stats():
    s = N.memory_stats()
    for pool, (count, nbytes) in _non_releasable_from_snapshot().items():
        assert s[f"inactive_split.{pool}.current"] == count, pool
        assert s[f"inactive_split_bytes.{pool}.current"] == nbytes, pool


def test_non_releasable_memory_matches_the_snapshot():
    # A free block between live ones keeps its segment from being released; the
    # statistics count exactly the free blocks of split segments.
    _check_non_releasable_stats()
    a = torch.empty(1000, device="neuron")
    b = torch.empty(1000, device="neuron")
    big = torch.empty(3 * MIB, dtype=torch.uint8, device="neuron")
    _check_non_releasable_stats()
    pa = a.data_ptr()
    del a
    _check_non_releasable_stats()
    _, blk = _block_at(pa)
    assert blk["state"] == "inactive"
    assert N.memory_stats()["inactive_split.small_pool.current"] >= 1
    del b, big
    _check_non_releasable_stats()


# --- snapshots ----------------------------------------------------------------------


def _block_at(ptr):
    # The block holding address ptr (a freed block may have merged with neighbours).
    for seg in N.memory_snapshot():
        for b in seg["blocks"]:
            if b["address"] <= ptr < b["address"] + b["size"]:
                return seg, b
    raise AssertionError(f"no block at {ptr:#x}")


def _allocate_in_a_named_function():
    a = torch.randn(1000, device="neuron")
    return a * 2


def test_snapshot_names_size_state_stream_and_op():
    unrecorded = torch.empty(1000, device="neuron")
    # Ops are recorded while history recording is on; context=None: no stacks.
    N.memory._record_memory_history(enabled="state", context=None)
    y = _allocate_in_a_named_function()
    seg, b = _block_at(y.data_ptr())
    assert b["state"] == "active_allocated"
    assert b["size"] == 4096 and b["requested_size"] == 4000
    assert b["op"] == "aten::mul.Tensor", b["op"]
    assert b["frames"] == []
    assert _block_at(unrecorded.data_ptr())[1]["op"] is None
    assert seg["device"] == 0 and seg["segment_type"] == "small"
    assert seg["stream"] == N.current_stream().stream_id
    assert seg["total_size"] == sum(x["size"] for x in seg["blocks"])
    assert seg["allocated_size"] >= 4096
    z = torch.empty(5, 5, device="neuron")
    assert _block_at(z.data_ptr())[1]["op"] == "aten::empty"
    ptr = y.data_ptr()
    del y
    seg, b = _block_at(ptr)  # still cached, now free
    assert b["state"] == "inactive" and b["op"] is None and b["requested_size"] == 0
    assert N.memory_snapshot() == N.memory._snapshot()["segments"]


def test_snapshot_records_python_stacks_and_a_trace():
    N.memory._record_memory_history(max_entries=1000)
    y = _allocate_in_a_named_function()
    ptr = y.data_ptr()
    _, b = _block_at(ptr)
    names = [(f["filename"], f["name"]) for f in b["frames"]]
    assert (__file__, "_allocate_in_a_named_function") in names, names
    assert any(f["name"] == "test_snapshot_records_python_stacks_and_a_trace" for f in b["frames"])
    del y
    trace = N.memory._snapshot()["device_traces"][0]
    actions = [e["action"] for e in trace if e["addr"] == ptr]
    assert actions[:3] == ["alloc", "free_requested", "free_completed"], actions
    alloc = next(e for e in trace if e["addr"] == ptr and e["action"] == "alloc")
    assert alloc["size"] == 4096 and alloc["op"].startswith("aten::mul")
    assert any(f["name"] == "_allocate_in_a_named_function" for f in alloc["frames"])
    # Turning recording off drops the trace and stops recording stacks.
    N.memory._record_memory_history(enabled=None)
    w = torch.empty(1000, device="neuron")
    assert _block_at(w.data_ptr())[1]["frames"] == []
    assert N.memory._snapshot()["device_traces"][0] == []


def test_trace_keeps_only_max_entries():
    N.memory._record_memory_history(max_entries=4)
    for _ in range(5):
        torch.empty(10, device="neuron")
    trace = N.memory._snapshot()["device_traces"][0]
    assert len(trace) == 4


def test_record_history_state_only_keeps_stacks_without_a_trace():
    N.memory._record_memory_history(enabled="state")
    y = _allocate_in_a_named_function()
    assert any(
        f["name"] == "_allocate_in_a_named_function" for f in _block_at(y.data_ptr())[1]["frames"]
    )
    assert N.memory._snapshot()["device_traces"][0] == []


def test_record_history_bad_arguments():
    with pytest.raises(ValueError, match="enabled"):
        N.memory._record_memory_history(enabled="yes")
    with pytest.raises(ValueError, match="stacks"):
        N.memory._record_memory_history(stacks="cpp")
    with pytest.raises(ValueError, match="max_entries"):
        N.memory._record_memory_history(max_entries=-1)
    with pytest.raises(IndexError):
        N.memory._snapshot(device=99)


def test_dump_snapshot_is_readable_by_torch_memory_viz(tmp_path):
    from torch.cuda import _memory_viz

    N.memory._record_memory_history()
    keep = torch.randn(64, 64, device="neuron") @ torch.randn(64, 64, device="neuron")
    path = tmp_path / "snap.pickle"
    N.memory._dump_snapshot(str(path))
    with open(path, "rb") as f:
        snap = pickle.load(f)
    assert any(b["address"] == keep.data_ptr() for s in snap["segments"] for b in s["blocks"])
    # CUDA's own tools read it.
    assert "segment" in _memory_viz.segsum(snap).lower()
    assert "free completed" in _memory_viz.trace(snap)
