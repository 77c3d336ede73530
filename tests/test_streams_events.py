"""Asynchronous execution: streams, events, sync points, NEURON_LAUNCH_BLOCKING.

Nothing here times a call against a threshold: a call is asynchronous when the
stream is still busy right after it returned, and a sync point is one after which
the stream is idle. ``busy`` queues a chain of big matmuls (about a second of
device work) so that "still busy" cannot be an accident of timing.
"""

import json
import time

import pytest
import torch

N = torch.neuron


def _validate_signatures(busy_fn):
    # The first call of each argument signature is validated: the host waits
    # for it (docs/device.md, "Errors at the call"). The tests below check that later
    # calls are only queued, so the signatures they use run once first.
    b = busy_fn(1)
    ((b @ b).relu() + b).mul_(2)
    for n in (2, 4):
        x = torch.ones(n, device="neuron")
        x.add_(torch.ones(n, device="neuron"))
        x.mul_(torch.ones(n, device="neuron"))
    N.synchronize()


@pytest.fixture(autouse=True)
def _idle_device(busy_fn):
    _validate_signatures(busy_fn)
    yield
    N.set_stream(N.default_stream())
    N.synchronize()


def _wait_until(pred, timeout=60.0):
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            return False
        time.sleep(0.001)
    return True


# --- asynchronous ops ----------------------------------------------------------------


def test_ops_return_before_the_device_ran_them(busy_fn):
    a = torch.randn(1024, 1024, device="neuron") / 32
    ac = a.cpu()
    b = busy_fn(12)
    c = (b @ a).relu() + b
    assert not N.current_stream().query(), "ops ran synchronously"
    N.synchronize()
    assert N.current_stream().query()
    # And the work was really done, in order.
    assert torch.isfinite(c.cpu()).all()
    torch.testing.assert_close(a.cpu(), ac)


def test_results_of_async_chain_match_cpu():
    torch.manual_seed(0)
    xc = torch.randn(256, 256) / 16
    x = xc.neuron()
    y, yc = x, xc
    for _ in range(8):
        y = torch.tanh(y @ x) + y
        yc = torch.tanh(yc @ xc) + yc
    torch.testing.assert_close(y.cpu(), yc, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "op",
    [lambda t: t + 1, lambda t: t.mul_(2.5), lambda t: torch.add(t, 2, alpha=3)],
    ids=["add_int", "mul__float", "add_alpha"],
)
def test_python_scalar_ops_are_asynchronous(busy_fn, op):
    # The first call of an argument signature is validated (the host waits for
    # it: docs/device.md, "Errors at the call"); the calls after it must be queued.
    op(torch.ones(4, 4, device="neuron"))
    N.synchronize()
    b = busy_fn(12)
    op(b)
    assert not N.current_stream().query(), "op with a Python scalar ran synchronously"


def test_cpu_scalar_tensor_ops_are_asynchronous(busy_fn):
    torch.ones(4, 4, device="neuron") * torch.tensor(2.0)  # signature validated
    N.synchronize()
    b = busy_fn(12)
    c = b * torch.tensor(2.0)
    assert not N.current_stream().query()
    torch.testing.assert_close(c.cpu(), b.cpu() * 2)


# --- sync points ---------------------------------------------------------------------

SYNC_POINTS = {
    "item": lambda t: t.sum().item(),
    "cpu": lambda t: t.cpu(),
    "to_cpu": lambda t: t.to("cpu"),
    "tolist": lambda t: t[:2, :2].tolist(),
    "str": lambda t: str(t),
    "repr": lambda t: repr(t[0]),
    "print": lambda t: print(t[0, :3]),
    "numpy": lambda t: t[0].cpu().numpy(),
    "bool": lambda t: bool(t[0, 0] > -1e30),
    "float": lambda t: float(t[0, 0]),
    "synchronize": lambda t: N.synchronize(),
    "accelerator.synchronize": lambda t: torch.accelerator.synchronize(),
    "stream.synchronize": lambda t: N.current_stream().synchronize(),
}


def _event_sync(t):
    e = N.Event()
    e.record()
    e.synchronize()
    assert e.query()


SYNC_POINTS["event.synchronize"] = _event_sync


@pytest.mark.parametrize("name", list(SYNC_POINTS))
def test_sync_points_wait_for_the_stream(busy_fn, name, capsys):
    b = busy_fn(8)
    probe = N.Event()  # completes when everything queued before it ran
    probe.record()
    assert not probe.query()
    SYNC_POINTS[name](b)
    assert probe.query(), f"{name} returned before the device finished"


def test_sync_point_values_match_cpu():
    c = torch.arange(12.0).reshape(3, 4)
    n = c.neuron() * 2
    assert n.sum().item() == (c * 2).sum().item()
    assert n.tolist() == (c * 2).tolist()
    assert str(n).startswith("tensor([[ 0.,  2.,  4.,  6.]")
    assert "device='neuron:0'" in repr(n)


# --- streams -------------------------------------------------------------------------


def test_streams_run_concurrently(busy_fn):
    long_s, short_s = N.Stream(), N.Stream()
    assert long_s != short_s
    x = torch.ones(16, device="neuron")
    long_s.wait_stream(N.current_stream())
    short_s.wait_stream(N.current_stream())
    with N.stream(long_s):
        busy_fn(20)
    with N.stream(short_s):
        y = x + x
    # The short stream's item is not stuck behind the long stream's queue.
    assert _wait_until(short_s.query)
    assert not long_s.query(), "the short stream waited for the long one"
    assert y.cpu().eq(2).all()
    long_s.synchronize()
    assert long_s.query()


def test_streams_on_two_devices_run_concurrently(busy_fn, two_devices):
    with N.device(1):
        busy_fn(20)
        s1 = N.current_stream()
    y = torch.ones(8, device="neuron:0") * torch.ones(8, device="neuron:0")
    assert _wait_until(N.current_stream(0).query)
    assert not s1.query()
    assert y.cpu().eq(1).all()
    N.synchronize(1)


def test_stream_query_and_synchronize(busy_fn):
    s = N.Stream()
    assert s.query()  # nothing queued
    with N.stream(s):
        b = busy_fn(8)
    assert not s.query()
    assert N.default_stream().query()  # the default stream has nothing of it
    s.synchronize()
    assert s.query()
    assert torch.isfinite(b).all().item()


def test_stream_context_and_set_stream(two_devices):
    s = N.Stream()
    s1 = N.Stream(1)
    assert s1.device == torch.device("neuron:1")
    d = N.current_stream()
    with N.stream(s) as entered:
        assert entered is s
        assert N.current_stream() == s
        assert torch.accelerator.current_stream() == s
    assert N.current_stream() == d
    with N.stream(s1):
        # A stream of another device also makes that device current.
        assert N.current_device() == 1
        assert N.current_stream() == s1
        assert torch.ones(1, device="neuron").device.index == 1
    assert N.current_device() == 0
    assert N.current_stream() == d
    with N.stream(None):
        assert N.current_stream() == d
    N.set_stream(s)
    assert N.current_stream() == s
    N.set_stream(d)


def test_ops_inside_stream_context_run_on_that_stream(busy_fn):
    s = N.Stream()
    with N.stream(s):
        busy_fn(8)
    assert not s.query()
    assert N.default_stream().query()
    N.synchronize()


def test_stream_wait_stream_orders_work(busy_fn):
    producer, consumer = N.Stream(), N.Stream()
    x = torch.full((1024, 1024), 0.5, device="neuron")
    out = torch.empty(1024, 1024, device="neuron")
    producer.wait_stream(N.current_stream())
    consumer.wait_stream(N.current_stream())
    with N.stream(producer):
        b = busy_fn(10)
        out.copy_(b * 0 + x)  # written at the end of the producer's queue
    consumer.wait_stream(producer)
    with N.stream(consumer):
        got = out * 2
    assert not consumer.query(), "the consumer did not wait for the producer"
    consumer.synchronize()
    assert got.cpu().eq(1.0).all()


def test_stream_wait_event_orders_work(busy_fn):
    producer, consumer = N.Stream(), N.Stream()
    out = torch.zeros(64, device="neuron")
    producer.wait_stream(N.current_stream())
    consumer.wait_stream(N.current_stream())
    with N.stream(producer):
        busy_fn(10)
        out.fill_(3.0)
        ev = producer.record_event()
    consumer.wait_event(ev)
    with N.stream(consumer):
        got = out + out
    assert not consumer.query()
    N.current_stream().wait_stream(consumer)  # got is read on the default stream
    assert got.cpu().eq(6.0).all()


# --- events --------------------------------------------------------------------------


def test_event_record_query_synchronize(busy_fn):
    e, before = N.Event(), N.Event()
    assert e.query()  # not recorded yet: nothing to wait for
    busy_fn(8)
    before.record()
    e.record()
    assert not e.query() and not before.query()
    e.synchronize()
    assert e.query()
    assert before.query()  # work queued before e is done


def test_event_record_on_given_stream_and_wait(busy_fn):
    s, other = N.Stream(), N.Stream()
    e = N.Event()
    with N.stream(s):
        busy_fn(8)
    e.record(s)
    assert not e.query()
    e.wait(other)  # the other stream now waits for s
    with N.stream(other):
        torch.ones(4, device="neuron").add_(torch.ones(4, device="neuron"))
    assert not other.query()
    e.synchronize()
    other.synchronize()
    assert e.query() and other.query()


def test_event_wait_defaults_to_current_stream(busy_fn):
    s = N.Stream()
    e = N.Event()
    with N.stream(s):
        busy_fn(8)
        e.record()  # on the current stream: s
    assert not s.query()
    e.wait()  # the default stream waits
    torch.ones(2, device="neuron").mul_(torch.ones(2, device="neuron"))
    assert not N.default_stream().query()
    N.synchronize()


def test_event_elapsed_time(busy_fn):
    start, end = N.Event(enable_timing=True), N.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    busy_fn(6)
    end.record()
    end.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1000
    ms = start.elapsed_time(end)
    assert isinstance(ms, float)
    assert 0 < ms <= wall_ms + 1.0
    # Two events back to back: a tiny, non-negative interval.
    a, b = N.Event(enable_timing=True), N.Event(enable_timing=True)
    a.record()
    b.record()
    b.synchronize()
    assert 0 <= a.elapsed_time(b) < ms


def test_event_elapsed_time_needs_timing_and_completion(busy_fn):
    a, b = N.Event(), N.Event()
    a.record()
    b.record()
    b.synchronize()
    with pytest.raises((RuntimeError, ValueError), match="enable_timing"):
        a.elapsed_time(b)
    start, end = N.Event(enable_timing=True), N.Event(enable_timing=True)
    start.record()
    busy_fn(8)
    end.record()
    with pytest.raises(RuntimeError, match="complete|recorded"):
        start.elapsed_time(end)
    end.synchronize()
    assert start.elapsed_time(end) > 0


def test_stream_record_event_with_neuron_event(busy_fn):
    s = N.Stream()
    e = N.Event(enable_timing=True)
    with N.stream(s):
        busy_fn(4)
    assert s.record_event(e) is e
    assert not e.query()
    e.synchronize()
    assert e.query()


def test_interprocess_event_is_refused():
    with pytest.raises(RuntimeError, match="processes"):
        N.Event(interprocess=True)


# --- NEURON_LAUNCH_BLOCKING --------------------------------------------------------------


def test_launch_blocking_makes_ops_synchronous(run_py, check, busy_src):
    code = (
        "import json, torch\n"
        + busy_src
        + """
r = {"flag": torch.neuron.launch_blocking()}
b = busy(8)
r["idle_after_chain"] = torch.neuron.current_stream().query()
s = torch.neuron.Stream()
with torch.neuron.stream(s):
    busy(4)
    r["side_idle"] = s.query()
e = torch.neuron.Event()
busy(4)
e.record()
r["event_done"] = e.query()
x = torch.arange(6.0, device="neuron").reshape(2, 3)
r["values"] = (x @ x.t()).cpu().tolist()
print(json.dumps(r))
"""
    )
    r = json.loads(check(run_py(code, env={"NEURON_LAUNCH_BLOCKING": "1"})).splitlines()[-1])
    assert r == {
        "flag": True,
        "idle_after_chain": True,
        "side_idle": True,
        "event_done": True,
        "values": [[5.0, 14.0], [14.0, 50.0]],
    }


def test_launch_blocking_is_off_by_default():
    assert N.launch_blocking() is False


def test_device_work_leaves_the_host_thread_settings_alone():
    # Stream workers size their own OpenMP threads per item (one for small items,
    # csrc/core/compute_pool.h); the host's and new threads' settings stay the user's.
    import threading

    def new_thread_threads():
        seen = []
        t = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
        t.start()
        t.join(timeout=30)
        return seen

    n, before = torch.get_num_threads(), new_thread_threads()
    a = torch.randn(256, 256, device="neuron")
    b = (a @ a).relu()  # a large item, then small ones
    for _ in range(20):
        b = b[:16] * 0.5 + a[:16]
    expected = a.cpu()
    ref = (expected @ expected).relu()
    for _ in range(20):
        ref = ref[:16] * 0.5 + expected[:16]
    torch.testing.assert_close(b.cpu(), ref)
    assert torch.get_num_threads() == n
    assert new_thread_threads() == before
