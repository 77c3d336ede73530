"""Device errors: raised at the next sync point as torch.neuron.DeviceError (a
torch.AcceleratorError) naming the op; the device stays usable."""

import json
import pickle

import pytest
import torch
import torch.nn.functional as F

N = torch.neuron
DeviceError = N.DeviceError


@pytest.fixture(autouse=True)
def _clean_device():
    # No error of another test may be pending, and none of ours may leak out.
    N.synchronize()
    yield
    N.set_stream(N.default_stream())
    N.synchronize()  # raises if an error of the test was left unreported


@pytest.fixture(autouse=True)
def _signatures_validated():
    # The first call of each argument signature is validated: the host waits
    # for it and raises at the call (docs/device.md, "Errors at the call"), so it is
    # also a sync point for errors still pending. The deferred errors below
    # come from calls whose signatures already ran.
    x = torch.randn(5, 3, device="neuron")
    y = torch.index_select(x, 0, torch.tensor([0, 1], device="neuron"))
    (y * y).sum().item()
    torch.gather(x, 0, torch.tensor([[1, 0, 0]], device="neuron"))
    F.embedding(torch.tensor([1, 2], device="neuron"), torch.randn(4, 2, device="neuron"))
    N.synchronize()


def _bad_index_select():
    x = torch.randn(5, 3, device="neuron")
    return torch.index_select(x, 0, torch.tensor([0, 7], device="neuron"))


def _assert_device_works():
    c = torch.randn(6, 4)
    n = c.neuron()
    torch.testing.assert_close((n @ n.t() + 1).cpu(), c @ c.t() + 1)
    idx = torch.tensor([4, 0, 2])
    torch.testing.assert_close(torch.index_select(n, 0, idx.neuron()).cpu(), c[idx])
    N.synchronize()  # no error left behind


def test_index_select_out_of_range_raises_at_sync_point():
    y = _bad_index_select()  # no error here: the op only got queued
    z = y * y  # nor at later, asynchronous ops
    with pytest.raises(DeviceError) as ei:
        z.cpu()
    msg = str(ei.value)
    assert "aten::index_select" in msg, msg
    assert "out of range" in msg, msg
    assert "neuron:0" in msg, msg
    assert "NEURON_LAUNCH_BLOCKING" in msg, msg  # says how to find the op
    _assert_device_works()


def test_device_error_type_and_fields():
    assert issubclass(DeviceError, torch.AcceleratorError)
    assert issubclass(DeviceError, RuntimeError)  # what code written for CUDA catches
    assert torch_neuronx_error() is DeviceError
    s = N.Stream()
    with N.stream(s):
        _bad_index_select()
    with pytest.raises(DeviceError) as ei:
        s.synchronize()
    e = ei.value
    # The fields are the C++ error's, not read back from the message.
    assert (e.device, e.stream, e.op, e.step, e.step_index) == (
        0,
        s.stream_id,
        "aten::index_select",
        None,
        None,
    )
    assert e.work_item > 0
    assert "out of range" in e.detail
    assert isinstance(e.error_code, int)
    assert str(e).startswith(
        f"neuron:0: device error in aten::index_select (work item {e.work_item} on stream "
        f"{s.stream_id}): {e.detail}\nDevice errors are reported at the next synchronization "
        "point"
    ), str(e)
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is DeviceError and str(back) == str(e)
    assert (back.device, back.stream, back.work_item, back.op, back.detail) == (
        e.device,
        e.stream,
        e.work_item,
        e.op,
        e.detail,
    )
    _assert_device_works()


def torch_neuronx_error():
    import torch_neuronx

    return torch_neuronx.DeviceError


def test_embedding_out_of_range_raises_at_sync_point():
    weight = torch.randn(4, 2, device="neuron")
    out = F.embedding(torch.tensor([1, 9], device="neuron"), weight)
    with pytest.raises(DeviceError) as ei:
        N.synchronize()
    msg = str(ei.value)
    assert ei.value.op in ("aten::index_select", "aten::embedding"), msg
    assert "index_select" in msg or "embedding" in msg, msg
    assert "out of range" in msg, msg
    del out
    _assert_device_works()
    # A valid lookup gives CPU's result.
    wc = torch.randn(4, 2)
    ids = torch.tensor([[3, 0], [1, 1]])
    torch.testing.assert_close(F.embedding(ids.neuron(), wc.neuron()).cpu(), F.embedding(ids, wc))


@pytest.mark.parametrize(
    "sync",
    [
        lambda t: t.sum().item(),
        lambda t: t.cpu(),
        lambda t: t.tolist(),
        lambda t: str(t),
        lambda t: N.synchronize(),
        lambda t: N.current_stream().synchronize(),
        lambda t: torch.accelerator.synchronize(),
    ],
    ids=["item", "cpu", "tolist", "str", "synchronize", "stream.synchronize", "accelerator"],
)
def test_every_sync_point_raises_the_error(sync):
    # torch's own bindings (.item(), Stream.synchronize(), ...) and ours alike:
    # the exception keeps its type and fields through either.
    y = _bad_index_select()
    with pytest.raises(DeviceError, match="aten::index_select") as ei:
        sync(y)
    assert ei.value.op == "aten::index_select" and ei.value.device == 0
    _assert_device_works()


def test_an_error_raised_while_printing_leaves_vmap_working():
    # torch formats a tensor under a guard that disables functorch; the error a
    # print raises kept that guard alive with its traceback (pytest's ExceptionInfo
    # here, a reference cycle elsewhere), and every vmap until the next full garbage
    # collection failed: create_block_mask raised "Cannot access storage of
    # BatchedTensorImpl" (issue 43's fresh-machine failure in test_flex_attention).
    from torch.nn.attention.flex_attention import create_block_mask

    y = _bad_index_select()
    with pytest.raises(DeviceError, match="aten::index_select") as ei:
        print(y)
    assert ei.value.__traceback__ is not None  # the error is still alive
    excluded = str(torch._C._dispatch_tls_local_exclude_set())
    assert "FuncTorchDynamicLayerFrontMode" not in excluded, excluded
    x = torch.arange(6.0).view(2, 3)
    torch.testing.assert_close(torch.vmap(torch.sum)(x.neuron()).cpu(), torch.vmap(torch.sum)(x))
    mask = create_block_mask(lambda b, h, q, kv: q >= kv, 1, 1, 256, 256, device="neuron")
    cpu_mask = create_block_mask(lambda b, h, q, kv: q >= kv, 1, 1, 256, 256, device="cpu")
    torch.testing.assert_close(mask.to_dense().cpu(), cpu_mask.to_dense())
    _assert_device_works()


def test_event_synchronize_raises_the_error():
    _bad_index_select()
    e = N.Event()
    e.record()
    with pytest.raises(DeviceError, match="aten::index_select"):
        e.synchronize()
    _assert_device_works()


def test_error_is_raised_once():
    _bad_index_select()
    with pytest.raises(DeviceError, match="aten::index_select"):
        N.synchronize()
    N.synchronize()  # reported, cleared
    _assert_device_works()


def test_error_on_side_stream():
    s = N.Stream()
    with N.stream(s):
        _bad_index_select()
    with pytest.raises(DeviceError, match="aten::index_select") as ei:
        s.synchronize()
    assert ei.value.stream == s.stream_id != 0
    with N.stream(s):
        _assert_device_works()
    _assert_device_works()


def test_other_op_errors_name_their_op():
    x = torch.randn(5, 3, device="neuron")
    g = torch.gather(x, 0, torch.tensor([[9, 0, 0]], device="neuron"))
    with pytest.raises(DeviceError) as ei:
        g.cpu()
    assert ei.value.op == "aten::gather"
    assert "aten::gather" in str(ei.value)
    _assert_device_works()


def test_work_after_the_failure_is_not_half_done():
    # After the error is raised, new work runs normally and old tensors stay readable.
    keep = torch.arange(10.0, device="neuron")
    _bad_index_select()
    with pytest.raises(DeviceError):
        N.synchronize()
    assert keep.tolist() == list(map(float, range(10)))
    assert (keep * 2).sum().item() == 90.0


def test_user_errors_at_the_op_are_raised_at_once():
    # Shape errors need no device work: they come from the op itself, as on CPU.
    a = torch.randn(2, 3, device="neuron")
    b = torch.randn(4, 5, device="neuron")
    with pytest.raises(RuntimeError, match="cannot be multiplied|size mismatch|shapes"):
        a @ b
    _assert_device_works()


def test_launch_blocking_raises_at_the_op(run_py, check):
    code = """
import json
import torch
import torch.nn.functional as F
r = {}
x = torch.randn(5, 3, device="neuron")
try:
    torch.index_select(x, 0, torch.tensor([0, 7], device="neuron"))
    r["index_select"] = None
except torch.neuron.DeviceError as e:
    r["index_select"] = str(e)
    r["fields"] = [e.op, e.device, e.stream, e.step]
try:
    F.embedding(torch.tensor([1, 9], device="neuron"), torch.randn(4, 2, device="neuron"))
    r["embedding"] = None
except RuntimeError as e:
    r["embedding"] = str(e)
torch.neuron.synchronize()  # nothing left pending
c = torch.randn(5, 3)
n = c.to("neuron")
r["works"] = torch.equal((n * 2).cpu(), c * 2)
r["index_ok"] = torch.equal(
    torch.index_select(n, 0, torch.tensor([4, 0], device="neuron")).cpu(), c[[4, 0]]
)
print(json.dumps(r))
"""
    r = json.loads(check(run_py(code, env={"NEURON_LAUNCH_BLOCKING": "1"})).splitlines()[-1])
    assert r["index_select"] is not None, "no error at the op under NEURON_LAUNCH_BLOCKING=1"
    assert "aten::index_select" in r["index_select"]
    assert "out of range" in r["index_select"]
    assert "NEURON_LAUNCH_BLOCKING" not in r["index_select"]  # raised at the op already
    assert r["fields"] == ["aten::index_select", 0, 0, None]
    assert r["embedding"] is not None
    assert "index_select" in r["embedding"] or "embedding" in r["embedding"]
    assert r["works"] and r["index_ok"]
