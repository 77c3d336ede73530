"""The device timeline in torch.profiler (ProfilerActivity.PrivateUse1).

Every work item is a device event linked to the host op that queued it; the
exported trace has what Perfetto and TensorBoard's profiler plugin read
(complete events with pid/tid per device/stream, flows, process and thread
names); the estimated-Trainium track is beside each stream; key_averages()
counts device time once.
"""

import json
import os

import pytest
import torch

# PyTorch imports this module from inside the first with_stack profile of a
# process; the module's code object is gone by the time the profile names its
# frames, and the name reads freed memory (a torch 2.13 bug, CPU tensors
# too). Imported first, it is not part of any profile.
import torch.profiler.python_tracer  # noqa: F401
from torch._C._autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function, schedule

import torch_neuronx

ACTS = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def _step(x, w):
    return (x @ w).relu().sum()


def _trace(prof, tmp_path, name="trace.json"):
    path = os.path.join(tmp_path, name)
    prof.export_chrome_trace(path)
    with open(path) as f:
        return json.load(f)


def _device_events(trace, cat=None):
    return [
        e
        for e in trace["traceEvents"]
        if e.get("ph") == "X"
        and e.get("cat") in ("kernel", "gpu_memcpy")
        and (cat is None or e["cat"] == cat)
    ]


@pytest.fixture
def xw():
    x = torch.randn(128, 128, device="neuron")
    w = torch.randn(128, 128, device="neuron")
    torch.neuron.synchronize()
    return x, w


def test_key_averages_have_device_time_per_op(xw):
    x, w = xw
    with profile(activities=ACTS) as prof:
        for _ in range(3):
            _step(x, w)
        torch.neuron.synchronize()
    ops = {e.key: e for e in prof.key_averages()}
    assert ops["aten::mm"].device_time_total > 0
    assert ops["aten::mm"].self_device_time_total > 0
    assert ops["aten::matmul"].device_time_total >= ops["aten::mm"].self_device_time_total
    assert ops["aten::relu"].device_time_total > 0
    # The sort key works and the table names the device.
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=5)
    assert "NEURON" in table and "aten::mm" in table


def test_device_events_linked_to_their_host_op(xw, tmp_path):
    x, w = xw
    with profile(activities=ACTS) as prof:
        _step(x, w)
        torch.neuron.synchronize()
    trace = _trace(prof, tmp_path)
    events = trace["traceEvents"]
    dev = _device_events(trace)
    names = [e["name"] for e in dev]
    assert names == ["aten::mm", "aten::relu", "aten::sum.dim_IntList"]
    host_ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op"}
    flows_s = {e["id"]: e for e in events if e.get("ph") == "s"}
    flows_f = {e["id"]: e for e in events if e.get("ph") == "f"}
    for e in dev:
        assert e["pid"] == 0 and e["tid"] == 0  # neuron:0, default stream
        assert e["dur"] >= 0
        corr = e["args"]["correlation"]
        # The host op with that correlation id queued it, and a flow joins them.
        assert corr in host_ops
        assert e["args"]["External id"] == corr
        assert host_ops[corr]["name"] == e["name"].split(".")[0]
        assert corr in flows_s and corr in flows_f
        assert flows_f[corr]["pid"] == e["pid"] and flows_f[corr]["tid"] == e["tid"]
        assert flows_s[corr]["ts"] <= e["ts"]
        assert e["args"]["category"] == "compute"
        assert e["args"]["estimated trn2 us"] > 0
    mm = dev[0]
    assert mm["args"]["flops"] == 2 * 128**3
    assert mm["args"]["bytes"] == 3 * 128 * 128 * 4


def test_trace_has_what_viewers_need(xw, tmp_path):
    x, w = xw
    with profile(activities=ACTS) as prof:
        _step(x, w)
        y = x.cpu()  # a copy
        torch.neuron.synchronize()
    assert y.shape == x.shape
    trace = _trace(prof, tmp_path)
    meta = [e for e in trace["traceEvents"] if e.get("ph") == "M"]
    proc = {(e["pid"]): e["args"]["name"] for e in meta if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert proc[0] == "neuron:0"
    assert threads[(0, 0)] == "stream 0"
    assert threads[(0, 1000)] == "stream 0 (estimated trn2)"
    copies = _device_events(trace, "gpu_memcpy")
    assert [c["name"] for c in copies] == ["copy_device_to_host"]
    assert copies[0]["args"]["bytes"] == 2 * x.numel() * 4
    # The estimated track: the same items, in stream order, each as long as its
    # estimate and none before its measured item was queued.
    est = [
        e
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and e.get("pid") == 0 and e.get("tid") == 1000
    ]
    dev = _device_events(trace)
    assert [e["name"] for e in est] == [e["name"] for e in dev]
    for e, d in zip(est, dev, strict=True):
        assert e["dur"] == pytest.approx(d["args"]["estimated trn2 us"], rel=1e-3, abs=1e-3)
    for a, b in zip(est, est[1:], strict=False):
        assert b["ts"] >= a["ts"] + a["dur"] - 1e-3


def test_items_of_the_session_only(xw):
    x, w = xw
    _step(x, w)  # before: not profiled
    with profile(activities=ACTS) as prof:
        x.add(1)
        torch.neuron.synchronize()
    _step(x, w)  # after: not profiled
    torch.neuron.synchronize()
    items = torch_neuronx._C._profiler_items()
    assert [i["name"] for i in items] == ["aten::add.Tensor"]
    dev = [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]
    assert [e.name for e in dev] == ["aten::add.Tensor"]


def test_cpu_only_profile_records_no_device_items(xw):
    x, w = xw
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _step(x, w)
        torch.neuron.synchronize()
    assert not any(e.device_type == DeviceType.PrivateUse1 for e in prof.events())
    # Outside a profile, the runtime does not trace.
    _step(x, w)
    torch.neuron.synchronize()
    assert torch_neuronx._C._trace_drain() == []


def test_record_function_shapes_stack_flops(xw, tmp_path):
    x, w = xw
    with profile(activities=ACTS, record_shapes=True, with_stack=True, with_flops=True) as prof:
        with record_function("my_block"):
            _step(x, w)
        torch.neuron.synchronize()
    ops = {e.key: e for e in prof.key_averages()}
    assert ops["my_block"].device_time_total > 0  # the block's ops' device time
    mm = [e for e in prof.events() if e.name == "aten::mm"][0]
    assert mm.input_shapes == [[128, 128], [128, 128]]
    assert mm.flops == 2 * 128**3
    # with_stack: the Python frames are in the trace (FunctionEvent.stack is
    # empty on CPU too in this torch build).
    trace = _trace(prof, tmp_path)
    frames = [e["name"] for e in trace["traceEvents"] if e.get("cat") == "python_function"]
    assert any("test_profiler_timeline.py" in f and "_step" in f for f in frames)


def test_profile_memory_sees_device_allocations(xw):
    x, _ = xw
    with profile(activities=ACTS, profile_memory=True) as prof:
        y = x * 2  # 64 KiB
        del y
        torch.neuron.synchronize()
    ops = {e.key: e for e in prof.key_averages()}
    assert ops["aten::mul"].device_memory_usage == 128 * 128 * 4
    mem = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    neuron_mem = [e for e in mem if e.device_type() == torch._C._autograd.DeviceType.PrivateUse1]
    sizes = sorted(e.nbytes() for e in neuron_mem)
    assert sizes[0] == -128 * 128 * 4 and sizes[-1] == 128 * 128 * 4


def test_schedule_and_tensorboard_handler(xw, tmp_path):
    x, w = xw
    out = tmp_path / "tb"
    with profile(
        activities=ACTS,
        schedule=schedule(wait=1, warmup=1, active=2),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(str(out)),
    ) as prof:
        for _ in range(4):
            _step(x, w)
            torch.neuron.synchronize()
            prof.step()
    files = list(out.glob("*.pt.trace.json"))
    assert len(files) == 1
    trace = json.loads(files[0].read_text())
    dev = _device_events(trace)
    assert [e["name"] for e in dev].count("aten::mm") == 2  # the two active steps
    steps = [e for e in trace["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert steps


def test_streams_are_tracks_and_events_are_items(xw, tmp_path):
    x, w = xw
    side = torch.neuron.Stream()
    with profile(activities=ACTS) as prof:
        done = torch.neuron.Event()
        with torch.neuron.stream(side):
            y = x @ w
            done.record()
        torch.neuron.current_stream().wait_event(done)
        z = y + 1
        torch.neuron.synchronize()
    assert z.shape == y.shape
    trace = _trace(prof, tmp_path)
    dev = _device_events(trace)
    by_tid = {}
    for e in dev:
        by_tid.setdefault(e["tid"], []).append(e["name"])
    assert by_tid[side.stream_id][0] == "aten::mm"
    assert "aten::add.Tensor" in by_tid[0] or any("add" in n for n in by_tid[0])
    cats = {e["args"]["category"] for e in dev}
    assert "marker" in cats  # the record and the wait


def test_profiles_one_after_another(xw):
    x, w = xw
    for n in (1, 2):
        with profile(activities=ACTS) as prof:
            for _ in range(n):
                x.add(1)
            torch.neuron.synchronize()
        dev = [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]
        assert [e.name for e in dev] == ["aten::add.Tensor"] * n


def test_legacy_profiler_times_ops_with_device_events(xw):
    # torch's fallback for PrivateUse1 (no Kineto): the backend's profiler
    # stubs record a device event when each op starts and ends.
    x, w = xw
    with torch.autograd.profiler.profile(use_device="neuron", use_kineto=False) as prof:
        _step(x, w)
        torch.neuron.synchronize()
    ops = {e.key: e for e in prof.key_averages()}
    assert ops["aten::mm"].device_time_total > 0
    assert ops["aten::mm"].cpu_time_total > 0
    assert "NEURON" in prof.key_averages().table(row_limit=3)


def _profile_cpu_code_in_forked_child(conn):
    out = {}
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            torch.ones(4).add(1)
        out["cpu"] = sorted({e.name for e in prof.events()})
        try:
            with profile():  # default activities: CPU and the device
                torch.ones(4).add(1)
            out["default"] = "no error"
        except RuntimeError as e:
            out["default"] = str(e)
    except BaseException as e:  # pragma: no cover - reported to the parent
        out["unexpected"] = repr(e)
    conn.send(out)


def test_profiles_in_a_forked_child(xw):
    # The parent has used the device; a forked child cannot. As with CUDA, a
    # CPU profile works there, and a profile of the device (torch.profiler's
    # default activities) fails with the fork error, not a crash.
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_profile_cpu_code_in_forked_child, args=(child,))
    p.start()
    try:
        assert parent.poll(60), "the child did not answer"
        out = parent.recv()
    finally:
        p.join(30)
        if p.is_alive():
            p.kill()
            p.join()
    assert "unexpected" not in out, out
    assert "aten::add" in out["cpu"]
    assert "forked subprocess" in out["default"]
    assert p.exitcode == 0


def test_every_device_is_a_named_process(tmp_path):
    if torch.neuron.device_count() < 2:
        pytest.skip("needs two devices")
    x = torch.randn(16, 16, device="neuron:0")
    y = torch.randn(16, 16, device="neuron:1")
    with profile(activities=ACTS) as prof:
        (x @ x).sum()
        (y @ y).sum()
        torch.neuron.synchronize(0)
        torch.neuron.synchronize(1)
    trace = _trace(prof, tmp_path)
    names = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "M" and e["name"] == "process_name":
            names[e["pid"]] = e["args"]["name"]  # the last one stands
    assert names[0] == "neuron:0" and names[1] == "neuron:1"
    dev = _device_events(trace)
    assert {e["pid"] for e in dev} == {0, 1}


def test_a_kept_profile_exports_after_later_profiles(xw, tmp_path):
    # The device events live with the profile's own trace, not in a bounded
    # store of recent sessions: an old profile still exports them.
    x, w = xw
    with profile(activities=ACTS) as first:
        _step(x, w)
        torch.neuron.synchronize()
    for _ in range(6):
        with profile(activities=ACTS):
            x.add(1)
            torch.neuron.synchronize()
    trace = _trace(first, tmp_path)
    names = [e["name"] for e in _device_events(trace)]
    assert names == ["aten::mm", "aten::relu", "aten::sum.dim_IntList"]
    assert all(e["args"]["category"] == "compute" for e in _device_events(trace))
