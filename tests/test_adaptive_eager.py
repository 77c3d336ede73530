"""Adaptive eager (first stage): repeated op sequences run as one work item, with
plain eager's results, order, errors and memory."""

import json
import os
import subprocess
import sys

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torch_neuronx

pytestmark = pytest.mark.usefixtures("adaptive_eager_defaults")


def _train(adaptive, steps=6, read_loss=True, seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64),
        torch.nn.Dropout(0.2),
        torch.nn.GELU(),
        torch.nn.LayerNorm(64),
        torch.nn.Linear(64, 4),
    ).to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(16, 32, device="neuron")
    torch.neuron.manual_seed(seed)
    losses = []
    torch.neuron.reset_adaptive_eager()
    with torch.neuron.adaptive_eager(adaptive):
        for _ in range(steps):
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item() if read_loss else loss.detach())
        stats = torch.neuron.adaptive_eager_stats()
    losses = [float(v) for v in losses]
    return losses, [p.detach().cpu() for p in model.parameters()], stats


def test_api_and_stats():
    assert not torch.neuron.is_adaptive_eager_enabled()
    with torch.neuron.adaptive_eager():
        assert torch.neuron.is_adaptive_eager_enabled()
        with torch.neuron.adaptive_eager(False):
            assert not torch.neuron.is_adaptive_eager_enabled()
        assert torch.neuron.is_adaptive_eager_enabled()
    assert not torch.neuron.is_adaptive_eager_enabled()
    torch.neuron.set_adaptive_eager(True, threshold=3)
    stats = torch.neuron.adaptive_eager_stats()
    assert stats["enabled"] and stats["threshold"] == 3
    for key in (
        "windows",
        "sequences_adapted",
        "replays",
        "deviations",
        "items_in_replays",
        "evictions",
        "cached_sequences",
        "streams_given_up",
        "sequences_never_replayed",
        "families_stopped",
        "windows_not_adapted",
        "max_fruitless_adaptations",
        "hit_rate",
    ):
        assert key in stats
    with pytest.raises(ValueError, match="threshold"):
        torch.neuron.set_adaptive_eager(True, threshold=0)
    assert torch_neuronx.set_adaptive_eager is torch.neuron.set_adaptive_eager


@pytest.mark.parametrize("read_loss", [True, False], ids=["loss-read-each-step", "no-sync"])
def test_training_equals_plain_eager_bitwise(read_loss):
    plain, plain_params, _ = _train(False, read_loss=read_loss)
    adapted, adapted_params, stats = _train(True, read_loss=read_loss)
    assert adapted == plain
    for a, b in zip(adapted_params, plain_params, strict=True):
        assert torch.equal(a, b)
    assert stats["sequences_adapted"] >= 1
    assert stats["replays"] >= 1 and stats["items_in_replays"] > 20


def test_one_device_item_per_replayed_sequence(tmp_path):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        _train(True, steps=5)
    items = torch_neuronx._C._profiler_items()
    adapted = [i for i in items if i["parent"] < 0 and i["name"].startswith("adaptive ")]
    assert adapted, [i["name"] for i in items if i["parent"] < 0]
    top = items.index(adapted[0])
    children = [i for i in items if i["parent"] == top]
    # Its ops, and fused steps among them (a range around the ops it ran as one
    # pass, each op pointing at it with fused_into).
    ops_run = [i for i in children if i["category"] != "fused"]
    first, last = adapted[0]["name"][len("adaptive ") :].split(" .. ")
    assert ops_run[0]["name"] == first and ops_run[-1]["name"] == last
    assert len(ops_run) >= 3
    fused = [(k, i) for k, i in enumerate(items) if i["parent"] == top and i["category"] == "fused"]
    assert fused, [i["name"] for i in children]
    for k, step in fused:
        inside = [i for i in items if i["fused_into"] == k]
        assert len(inside) >= 2 and inside == items[k + 1 : k + 1 + len(inside)]
        assert step["name"] == f"fused {inside[0]['name']} .. {inside[-1]['name']}"
        assert 0 < step["estimate_ns"] < sum(i["estimate_ns"] for i in inside)
        # The ops share the step's measured span, one after another.
        assert inside[0]["start_ns"] == step["start_ns"] and inside[-1]["end_ns"] == step["end_ns"]
        for a, b in zip(inside, inside[1:], strict=False):
            assert a["end_ns"] == b["start_ns"]
    assert all(i["fused_into"] == -1 for i in items if i["parent"] < 0 or i["category"] == "fused")
    # The sequence it replays, as a field (the same sequence every step).
    sequences = {i["adaptive_sequence"] for i in adapted}
    assert 0 not in sequences and len(sequences) <= len(adapted)
    assert all(i["adaptive_sequence"] == 0 for i in children)
    assert all(i["adaptive_sequence"] == 0 for i in items if i["parent"] < 0 and i not in adapted)
    # One pipeline of its steps (the fused step standing for the ops it ran): not
    # its first op's estimate, at most the sum of its steps'.
    steps = [i for i in children if i["fused_into"] < 0]
    assert 0 < adapted[0]["estimate_ns"] <= sum(i["estimate_ns"] for i in steps)
    assert adapted[0]["estimate_ns"] > ops_run[0]["estimate_ns"]
    # Each op inside keeps its own device time, linked to the op that queued it;
    # the combined item is their range on the stream's track.
    ops = {e.key: e for e in prof.key_averages()}
    assert ops["aten::addmm"].device_time_total > 0
    assert not any(e.name.startswith("adaptive ") for e in prof.events())
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    ranges = [e for e in events if e.get("ph") == "X" and e["name"].startswith("adaptive ")]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert ranges and ranges[0]["tid"] == 0 and ranges[0]["pid"] == 0
    inside = [
        k
        for k in kernels
        if k["tid"] == 0 and ranges[0]["ts"] <= k["ts"] <= ranges[0]["ts"] + ranges[0]["dur"]
    ]
    assert [k["name"] for k in inside][:1] == [first]
    assert all("correlation" in k["args"] for k in inside)
    # A fused step is a range on the same track (not a kernel), its ops' kernels
    # nested in it, each still linked to its host op.
    franges = [e for e in events if e.get("ph") == "X" and e["name"].startswith("fused ")]
    assert franges and not any(e.get("cat") == "kernel" for e in franges)
    on_track = [e for e in franges if e["tid"] == 0]
    f0 = on_track[0]
    nested = [
        k
        for k in kernels
        if k["tid"] == 0
        and f0["ts"] - 1e-3 <= k["ts"]
        and k["ts"] + k["dur"] <= f0["ts"] + f0["dur"] + 1e-3
        and k["args"].get("fused into") == f0["name"]
    ]
    assert len(nested) >= 2 and all("correlation" in k["args"] for k in nested)


def test_profiling_tables_keep_adaptive_items():
    # torch.profiler shows an adaptive item's ops, not the item: the tables still
    # take the runtime's items (with children and sequence ids), not a rebuild.
    import warnings

    from torch_neuronx.profiling import summary, tables

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        _train(True, steps=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        items = tables.device_items(prof)
    adapted = items[(items["parent"] < 0) & (items["adaptive_sequence"] != 0)]
    assert len(adapted) >= 1
    assert adapted["name"].str.startswith("adaptive ").all()
    assert items["parent"].isin(adapted.index).any()  # their ops are children
    s = summary.step_summary(prof)
    assert s["items"] >= len(adapted) and s["estimated_ns"] > 0


def test_sync_points_views_inplace_and_printing():
    torch.neuron.set_adaptive_eager(True)
    base = torch.arange(64.0, device="neuron").reshape(8, 8)
    expected = base.cpu()
    for step in range(6):
        v = base[2:6, 1:5]  # a view
        v.mul_(1.5)  # in place through the view
        expected[2:6, 1:5] *= 1.5
        w = base.t().contiguous().add(step)
        expected_w = expected.t().contiguous() + step
        if step == 3:
            text = repr(w)  # printing mid-step is a sync point
            assert "tensor" in text
        torch.testing.assert_close(w.cpu(), expected_w, rtol=0, atol=0)
    torch.testing.assert_close(base.cpu(), expected, rtol=0, atol=0)


def test_side_streams_and_events_keep_their_order():
    torch.neuron.set_adaptive_eager(True)
    side = torch.neuron.Stream()
    x = torch.randn(64, 64, device="neuron")
    # x is written on the current stream: as with CUDA, the side stream must wait for
    # it before reading it (without this the side stream's matmul read x's memory
    # before randn wrote it when the default stream's worker was slow - seen under load).
    side.wait_stream(torch.neuron.current_stream())
    results = []
    for _ in range(5):
        done = torch.neuron.Event()
        with torch.neuron.stream(side):
            y = (x @ x).relu_()
            y.mul_(0.5)
            done.record()
        torch.neuron.current_stream().wait_event(done)
        z = y.sum(dim=0).add_(1)
        # y is read on this stream but was allocated on `side`: as with CUDA, its
        # memory could be reused there (by the next matmul) before this stream's read
        # has run, unless the read is recorded.
        y.record_stream(torch.neuron.current_stream())
        results.append(z)
    ref = (x.cpu() @ x.cpu()).relu_().mul_(0.5).sum(dim=0).add_(1)
    for z in results:
        torch.testing.assert_close(z.cpu(), ref)


def test_memory_peak_is_plain_eagers():
    def peak(adaptive):
        torch.neuron.synchronize()
        torch.neuron.reset_peak_memory_stats()
        _train(adaptive, steps=5, read_loss=False)
        torch.neuron.synchronize()
        return torch.neuron.max_memory_allocated()

    plain = peak(False)
    adapted = peak(True)
    assert adapted <= plain * 1.05 + 64 * 1024, (plain, adapted)


def test_a_failing_op_in_a_replay_names_the_op():
    torch.neuron.set_adaptive_eager(True)
    table = torch.randn(10, 8, device="neuron")
    good = torch.tensor([1, 2, 3], device="neuron")
    for _ in range(4):  # adapted and replayed
        out = table.index_select(0, good).relu().sum()
        out.item()
    bad = torch.tensor([1, 2, 99], device="neuron")  # same signature, bad value
    assert torch.neuron.adaptive_eager_stats()["replays"] >= 1
    # The replay stands for the user's ops: the error is the op's own, as plain eager
    # reports it (the fields code written for plain eager reads, the same message).
    replays = torch.neuron.adaptive_eager_stats()["replays"]
    with pytest.raises(torch_neuronx.DeviceError) as ei:
        table.index_select(0, bad).relu().sum().item()
    assert torch.neuron.adaptive_eager_stats()["replays"] == replays + 1
    e = ei.value
    assert (e.op, e.step, e.step_index) == ("aten::index_select", None, None)
    assert str(e).startswith(
        f"neuron:0: device error in aten::index_select (work item {e.work_item} on stream "
    ), str(e)
    assert "out of range" in e.detail
    # The device is usable after the error.
    assert table.index_select(0, good).sum().item() == pytest.approx(
        table.cpu().index_select(0, good.cpu()).sum().item(), rel=1e-6
    )


def test_shapes_changing_every_step_give_up_with_one_line(capfd):
    torch_neuronx._C._adaptive_configure(2, 16, 5)
    torch.neuron.set_adaptive_eager(True)
    for n in range(2, 12):
        x = torch.randn(n, n, device="neuron")
        (x @ x).relu().sum().item()
    stats = torch.neuron.adaptive_eager_stats()
    assert stats["streams_given_up"] >= 1
    assert stats["sequences_adapted"] == 0
    err = capfd.readouterr().err
    assert err.count("runs plain eager from now on") == stats["streams_given_up"]


def _run(code, env):
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_environment_variable_and_launch_blocking():
    code = "import torch, torch_neuronx; print(torch.neuron.is_adaptive_eager_enabled())"
    r = _run(code, {"TORCH_NEURONX_ADAPTIVE_EAGER": "1"})
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr
    r = _run(code, {"TORCH_NEURONX_ADAPTIVE_EAGER": "1", "NEURON_LAUNCH_BLOCKING": "1"})
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr
    assert "NEURON_LAUNCH_BLOCKING" in r.stderr
    r = _run(code, {"TORCH_NEURONX_ADAPTIVE_EAGER": "maybe"})
    assert r.returncode == 0 and r.stdout.strip() == "False"
    assert "TORCH_NEURONX_ADAPTIVE_EAGER" in r.stderr


def test_hooks_retain_grad_out_and_autocast_as_plain_eager():
    def run(adaptive):
        torch.manual_seed(3)
        lin = torch.nn.Linear(16, 16).to("neuron")
        x = torch.randn(8, 16, device="neuron")
        seen = []
        lin.weight.register_hook(lambda g: seen.append(g.detach().sum().item()))
        out_buf = torch.empty(8, 16, device="neuron")
        results = []
        torch.neuron.reset_adaptive_eager()
        with torch.neuron.adaptive_eager(adaptive):
            for _ in range(5):
                h = lin(x)
                h.retain_grad()
                with torch.autocast("neuron", dtype=torch.bfloat16):
                    a = (h @ h.t()).float()
                with torch.no_grad():
                    torch.add(h, 1.0, out=out_buf)
                loss = (a.sum() + h.sum()) * 1e-3
                loss.backward()
                results.append((loss.item(), h.grad.cpu(), out_buf.cpu(), a.dtype))
                lin.zero_grad()
        return results, seen, torch.neuron.adaptive_eager_stats()

    plain, plain_seen, _ = run(False)
    adapted, adapted_seen, stats = run(True)
    assert adapted_seen == plain_seen
    for (l1, g1, o1, d1), (l2, g2, o2, d2) in zip(plain, adapted, strict=True):
        assert l1 == l2 and d1 == d2
        assert torch.equal(g1, g2) and torch.equal(o1, o2)
    assert stats["replays"] >= 1


def _generate_calls(model, ids, calls):
    """Greedy generate() with a growing (dynamic) KV cache, `calls` times: each
    decode step's window is the previous one's ops on shapes one longer."""
    outs, per_call = [], []
    for _ in range(calls):
        before = torch.neuron.adaptive_eager_stats()
        with torch.no_grad():
            outs.append(model.generate(ids, max_new_tokens=12, min_new_tokens=12, do_sample=False))
        after = torch.neuron.adaptive_eager_stats()
        keys = ("sequences_adapted", "evictions", "replays", "windows_not_adapted")
        per_call.append({k: after[k] - before[k] for k in keys})
    return [o.cpu() for o in outs], per_call


def test_sequences_that_never_come_back_stop_being_adapted():
    # generate() with a KV cache adapted every decode window and evicted it before it
    # came back (issue 33: 99 adapted, 83 evicted). Its family (the same ops, shapes
    # aside) is stopped on the stream; a training step in the same process (same
    # stream) is still adapted and replayed, bitwise plain eager; starting afresh
    # forgets the family.
    pytest.importorskip("transformers")
    from hf_tiny import tiny_llama

    model = tiny_llama().to("neuron")
    ids = torch.tensor([[1, 5, 9, 13, 17, 21]], device="neuron")
    plain, _ = _generate_calls(model, ids, 1)

    # A cache of 8: the call's few windows that do repeat (prefill, the stopping
    # checks) are kept, its 12 decode steps cannot all be.
    torch_neuronx._C._adaptive_configure(2, 8, 64, 3)
    torch.neuron.set_adaptive_eager(True)
    outs, per_call = _generate_calls(model, ids, 6)
    for out in outs:
        assert torch.equal(out, plain[0])
    stats = torch.neuron.adaptive_eager_stats()
    assert stats["families_stopped"] >= 1
    assert stats["sequences_never_replayed"] >= 3
    # The last calls adapt and evict nothing, skip the decode windows, and replay what
    # the stream still keeps.
    for call in per_call[-2:]:
        assert call["sequences_adapted"] == 0 and call["evictions"] == 0, per_call
        assert call["windows_not_adapted"] >= 4, per_call
        assert call["replays"] >= 1, per_call

    # The same stream, with the decode family stopped: a training step (another
    # family) still adapts and replays, with plain eager's results.
    def steps(n):
        torch.manual_seed(1)
        lin = torch.nn.Linear(16, 16).to("neuron")
        opt = torch.optim.AdamW(lin.parameters(), lr=1e-2)
        x = torch.randn(8, 16, device="neuron")
        losses = []
        for _ in range(n):
            loss = lin(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses, lin.weight.detach().cpu()

    torch.neuron.set_adaptive_eager(False)
    plain_losses, plain_weight = steps(5)
    torch.neuron.set_adaptive_eager(True)
    before = torch.neuron.adaptive_eager_stats()
    losses, weight = steps(5)
    after = torch.neuron.adaptive_eager_stats()
    assert losses == plain_losses and torch.equal(weight, plain_weight)
    assert after["sequences_adapted"] > before["sequences_adapted"]
    assert after["replays"] >= before["replays"] + 2
    assert after["families_stopped"] == stats["families_stopped"]

    # Starting afresh forgets the stopped family: the second call adapts again.
    torch.neuron.reset_adaptive_eager()
    outs, per_call = _generate_calls(model, ids, 2)
    assert torch.equal(outs[-1], plain[0])
    assert per_call[1]["sequences_adapted"] >= 4 and per_call[1]["windows_not_adapted"] == 0
