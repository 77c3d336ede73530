"""Eager ops on neuron against CPU: views, in-place, out=, copies, foreach, scalars, op stats."""

import pytest
import torch

import torch_neuronx

N = torch.neuron


def _same(cpu_result, neuron_result, exact=False):
    if isinstance(cpu_result, (tuple, list)):
        assert isinstance(neuron_result, (tuple, list))
        assert len(cpu_result) == len(neuron_result)
        for c, n in zip(cpu_result, neuron_result, strict=True):
            _same(c, n, exact)
        return
    assert neuron_result.device.type == "neuron", neuron_result.device
    got = neuron_result.cpu()
    assert got.dtype == cpu_result.dtype
    assert got.shape == cpu_result.shape
    if exact:
        assert torch.equal(got, cpu_result)
    else:
        torch.testing.assert_close(got, cpu_result)


def _check(fn, *cpu_inputs, exact=False):
    """Runs fn on CPU inputs and on their neuron copies and compares."""
    neuron_inputs = [t.neuron() if isinstance(t, torch.Tensor) else t for t in cpu_inputs]
    _same(fn(*cpu_inputs), fn(*neuron_inputs), exact)


@pytest.fixture
def x():
    torch.manual_seed(0)
    return torch.randn(4, 6)


# --- views and non-contiguous tensors --------------------------------------------------

VIEW_FNS = {
    "t": lambda a: a.t() * 2,
    "transpose_contiguous": lambda a: a.transpose(0, 1).contiguous(),
    "slice_step": lambda a: a[:, 1::2] + 1,
    "narrow": lambda a: a.narrow(1, 2, 3).exp(),
    "select": lambda a: a[2].sin(),
    "view": lambda a: a.view(2, 12).sum(1),
    "reshape_noncontig": lambda a: a.t().reshape(24),
    "expand": lambda a: a[:1].expand(3, 6) + a[:3],
    "unsqueeze_permute": lambda a: a.unsqueeze(0).permute(2, 0, 1).mul(3),
    "as_strided": lambda a: a.as_strided((3, 3), (1, 6)).clone(),
    "unfold": lambda a: a.unfold(1, 2, 2).sum(-1),
    "diagonal": lambda a: a.diagonal().neg(),
    "flip": lambda a: a.flip(0),
    "chunk": lambda a: [c.abs() for c in a.chunk(3, dim=1)],
    "matmul_noncontig": lambda a: a.t() @ a,
    "view_of_view": lambda a: a[1:, ::2].t()[1:],
}


@pytest.mark.parametrize("name", list(VIEW_FNS))
def test_views_and_noncontiguous(x, name):
    _check(VIEW_FNS[name], x)


def test_views_share_storage(x):
    n = x.neuron()
    v = n.t()[1:]
    assert v.untyped_storage().data_ptr() == n.untyped_storage().data_ptr()
    assert v.is_contiguous() is False
    assert v._base is n
    n[1, 2] = 100.0
    assert v.cpu()[1, 1].item() == 100.0


def test_views_do_not_queue_work():
    C = torch_neuronx._C
    if not hasattr(C, "_trace_enable"):
        pytest.skip("no runtime trace in this build")
    n = torch.ones(4, 6, device="neuron")
    N.synchronize()
    C._trace_enable(True)
    try:
        C._trace_drain()
        n.t()
        n.view(24)
        n[1:, ::2]
        n.unsqueeze(0).expand(3, 4, 6)
        n.transpose(0, 1).narrow(0, 1, 2)
        n.as_strided((2, 2), (1, 6))
        N.synchronize()
        items = C._trace_drain()
        (n + 1).cpu()
        N.synchronize()
        control = C._trace_drain()
    finally:
        C._trace_enable(False)
    assert [r["label"] for r in items] == []
    assert control, "the trace recorded nothing: the check above proves nothing"


# --- in-place ops -----------------------------------------------------------------------


def test_inplace_ops(x):
    def f(a):
        b = a.clone()
        b.add_(1).mul_(2)
        b.clamp_(min=-1.0, max=3.0)
        b[:, 0].zero_()
        b.t()[1].fill_(7.0)
        b[b > 2.5] = -2.0
        b.masked_fill_(b < -1.5, 0.25)
        b.index_add_(0, torch.tensor([0, 0, 3], device=a.device), torch.ones(3, 6, device=a.device))
        b.copy_(b.flip(1))
        return b

    _check(f, x)


def test_inplace_on_view_updates_base(x):
    def f(a):
        b = a.clone()
        v = b[1:3, 2:]
        v.mul_(10)
        b.t()[0].sub_(5)
        return b

    _check(f, x)


def test_inplace_type_promotion_error_matches_cpu():
    for dev in ("cpu", "neuron"):
        i = torch.ones(3, dtype=torch.int64, device=dev)
        with pytest.raises(RuntimeError, match="can't be cast"):
            i.add_(torch.ones(3, device=dev) * 0.5)


# --- out= variants ------------------------------------------------------------------------


def test_out_variants(x):
    def f(a):
        out = torch.empty(0, device=a.device)
        torch.add(a, a, alpha=2, out=out)  # resized from empty
        out2 = torch.empty(4, 6, device=a.device)
        torch.mul(a, 3, out=out2)
        out3 = torch.empty(6, 4, device=a.device).t()  # non-contiguous out
        torch.sin(a, out=out3)
        vals = torch.empty(0, device=a.device)
        idx = torch.empty(0, dtype=torch.long, device=a.device)
        torch.max(a, 1, out=(vals, idx))
        mm = torch.empty(6, 6, device=a.device)
        torch.mm(a.t(), a, out=mm)
        return [out, out2, out3, vals, idx, mm]

    _check(f, x)


def test_out_returns_the_out_tensor(x):
    n = x.neuron()
    out = torch.empty(4, 6, device="neuron")
    assert torch.add(n, n, out=out) is out


def test_out_on_wrong_device_is_an_error(x):
    n = x.neuron()
    want = "Expected out tensor to have device neuron:0, but got"
    with pytest.raises(RuntimeError, match=f"{want} cpu"):
        torch.add(n, n, out=torch.empty(4, 6))
    with pytest.raises(RuntimeError, match=f"{want} neuron:1"):
        torch.add(n, n, out=torch.empty(4, 6, device="neuron:1"))


def test_out_of_wrong_dtype_is_an_error_at_the_op(x):
    n = x.neuron()
    out = torch.zeros(4, 6, dtype=torch.int64, device="neuron")
    for dev_x, dev_out in ((x, out.cpu()), (n, out)):
        with pytest.raises(RuntimeError, match="result type Float can't be cast"):
            torch.add(dev_x, dev_x, out=dev_out)
    vals = torch.empty(0, device="neuron")
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype long int"):
        torch.max(n, 1, out=(vals, torch.empty(0, dtype=torch.int32, device="neuron")))
    assert torch.equal(out.cpu(), torch.zeros(4, 6, dtype=torch.int64))  # nothing written


def test_out_of_wrong_shape_is_resized_with_cuda_warning(x):
    n = x.neuron()
    out = torch.empty(2, 2, device="neuron")
    with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
        torch.add(n, n, out=out)
    assert out.shape == (4, 6)
    assert torch.equal(out.cpu(), x + x)


def test_out_aliasing_an_input(x):
    # out= the first input: an in-place op written the out= way.
    a, b = x.clone(), x.neuron()
    torch.mul(a, 2, out=a)
    torch.mul(b, 2, out=b)
    assert torch.equal(b.cpu(), a)
    # A partially overlapping out is refused on both devices.
    for t in (torch.arange(10.0), torch.arange(10.0, device="neuron")):
        with pytest.raises(RuntimeError, match="unsupported operation"):
            torch.add(t[1:], 1, out=t[:-1])
        assert torch.equal(t.cpu(), torch.arange(10.0))  # nothing written


def test_structured_out_variants_run_on_the_device_fast_path(x):
    n = x.neuron()
    torch.neuron.synchronize()
    torch_neuronx.clear_op_stats()
    out = torch.empty(0, device="neuron")
    torch.sub(n, 1, out=out)
    torch.neuron.synchronize()
    assert "aten::sub.out" in torch_neuronx.get_executed_ops()
    assert not [op for op in torch_neuronx.get_fallback_ops() if op.startswith("aten::sub")]


# --- copies between devices ---------------------------------------------------------------


@pytest.mark.parametrize("src_dtype", [torch.float32, torch.float64, torch.int32, torch.bool])
@pytest.mark.parametrize("dst_dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64])
def test_copy_cpu_neuron_with_dtype(src_dtype, dst_dtype):
    c = (torch.randn(5, 7) * 10).to(src_dtype)
    n = c.to("neuron", dtype=dst_dtype)
    assert n.dtype == dst_dtype
    assert torch.equal(n.cpu(), c.to(dst_dtype))
    assert torch.equal(n.to("cpu", dtype=src_dtype), c.to(dst_dtype).to(src_dtype))


def test_copy_noncontiguous_both_ways():
    c = torch.randn(6, 8)
    src = c[::2, 1::3]  # non-contiguous CPU source
    n = src.to("neuron")
    assert torch.equal(n.cpu(), src)
    # Into a non-contiguous neuron destination.
    dst = torch.zeros(8, 6, device="neuron").t()
    dst.copy_(c[:6, :8])
    assert torch.equal(dst.cpu(), c[:6, :8])
    # Into a non-contiguous CPU destination from a non-contiguous neuron source.
    host = torch.zeros(8, 6).t()
    host.copy_(c.neuron()[:6, :8])
    assert torch.equal(host, c[:6, :8])
    # Broadcasting copy.
    row = torch.zeros(3, 8, device="neuron")
    row.copy_(torch.arange(8.0))
    assert torch.equal(row.cpu(), torch.arange(8.0).expand(3, 8))


def test_copy_between_neuron_devices(two_devices):
    c = torch.randn(4, 6)
    n0 = c.to("neuron:0")
    n1 = n0.to("neuron:1")
    assert n1.device == torch.device("neuron:1")
    assert torch.equal(n1.cpu(), c)
    # With a dtype change and a non-contiguous source.
    d = n0.t().to("neuron:1", dtype=torch.float64)
    assert d.device.index == 1 and d.dtype == torch.float64
    assert torch.equal(d.cpu(), c.t().double())
    # copy_ into a non-contiguous destination on the other device.
    dst = torch.zeros(6, 4, device="neuron:1", dtype=torch.float16)
    dst.t().copy_(n0)
    assert torch.equal(dst.cpu(), c.t().half())
    # And back.
    back = torch.empty(4, 6, device="neuron:0")
    back.copy_(n1 * 2)
    assert torch.equal(back.cpu(), c * 2)


def test_copy_between_devices_is_ordered(busy_fn, two_devices):
    # The copy waits for the producer on the source device and the consumer for the copy.
    b = busy_fn(6, device="neuron:0")
    expected = b.cpu()
    moved = b.to("neuron:1")
    result = (moved * 2).cpu()
    torch.testing.assert_close(result, expected * 2)


def test_non_blocking_host_to_device():
    c = torch.randn(1000)
    n = c.to("neuron", non_blocking=True)
    c.fill_(0.0)  # pageable source: staged at the call, as on CUDA
    assert n.cpu().eq(0).sum().item() < 1000


def test_non_blocking_device_to_host_and_pin_memory():
    c = torch.randn(1000)
    n = c.to("neuron")
    back = n.to("cpu", non_blocking=True)
    N.synchronize()
    assert torch.equal(back, c)
    pinned = torch.ones(3).pin_memory()
    assert pinned.is_pinned()


def test_clone_and_storage_roundtrip(x):
    n = x.neuron()
    cl = n.clone()
    assert cl.data_ptr() != n.data_ptr()
    assert torch.equal(cl.cpu(), x)
    s = n.untyped_storage()
    assert s.device.type == "neuron"
    assert s.nbytes() == x.numel() * 4
    assert s.cpu().tolist() == x.untyped_storage().tolist()


# --- torch._foreach_* ---------------------------------------------------------------------

FOREACH = {
    "add_scalar": lambda ts: torch._foreach_add(ts, 1.5),
    "add_list": lambda ts: torch._foreach_add(ts, ts, alpha=0.5),
    "mul_scalarlist": lambda ts: torch._foreach_mul(ts, [2.0, -1.0, 0.5]),
    "div_list": lambda ts: torch._foreach_div(ts, [t.abs() + 1 for t in ts]),
    "sqrt_abs": lambda ts: torch._foreach_sqrt(torch._foreach_abs(ts)),
    "exp": lambda ts: torch._foreach_exp(ts),
    "neg": lambda ts: torch._foreach_neg(ts),
    "norm": lambda ts: torch._foreach_norm(ts),
    "maximum": lambda ts: torch._foreach_maximum(ts, [t.flip(0) for t in ts]),
    "lerp": lambda ts: torch._foreach_lerp(ts, [t * 3 for t in ts], 0.25),
    "addcmul": lambda ts: torch._foreach_addcmul(ts, ts, ts, value=0.1),
    "addcdiv": lambda ts: torch._foreach_addcdiv(ts, ts, [t.abs() + 1 for t in ts], value=2),
}


def _foreach_inputs():
    torch.manual_seed(1)
    return [torch.randn(5), torch.randn(3, 4), torch.randn(2, 3, 2)]


@pytest.mark.parametrize("name", list(FOREACH))
def test_foreach_ops(name):
    cpu = _foreach_inputs()
    neu = [t.neuron() for t in cpu]
    _same(FOREACH[name](cpu), FOREACH[name](neu))


def test_foreach_inplace_ops():
    def f(ts):
        ts = [t.clone() for t in ts]
        torch._foreach_add_(ts, 1.0)
        torch._foreach_mul_(ts, ts)
        torch._foreach_addcmul_(ts, ts, ts, value=-0.5)
        torch._foreach_lerp_(ts, [t * 0 for t in ts], 0.5)
        torch._foreach_clamp_min_(ts, -0.25)
        torch._foreach_zero_(ts[:1])
        return ts

    cpu = _foreach_inputs()
    _same(f(cpu), f([t.neuron() for t in cpu]))


# --- CPU scalars mixed with neuron tensors ------------------------------------------------

SCALAR_MIX = {
    "add_cpu_scalar": lambda t: t + torch.tensor(2.0),
    "rmul_cpu_scalar": lambda t: torch.tensor(3.0) * t,
    "int_scalar_promotes": lambda t: t * torch.tensor(2),
    "double_scalar_keeps_dtype": lambda t: t + torch.tensor(0.5, dtype=torch.float64),
    "where": lambda t: torch.where(t > 0, t, torch.tensor(0.0)),
    "inplace": lambda t: t.clone().add_(torch.tensor(1.0)),
    "python_scalar": lambda t: t * 2.5 - 1,
    "python_scalar_inplace": lambda t: t.clone().mul_(4).add_(1, alpha=2),
    "pow": lambda t: t.abs() ** torch.tensor(0.5),
    "clamp": lambda t: t.clamp(min=torch.tensor(-0.5), max=torch.tensor(0.5)),
}


@pytest.mark.parametrize("name", list(SCALAR_MIX))
def test_cpu_scalars_mix_with_neuron_tensors(x, name):
    _check(SCALAR_MIX[name], x)


def test_cpu_scalar_value_is_taken_at_call_time(busy_fn):
    busy_fn(6)
    s = torch.tensor(2.0)
    t = torch.ones(3, device="neuron")
    r = t + s  # queued behind the busy work
    s.fill_(100.0)  # the host changes the scalar before the device runs the op
    assert r.tolist() == [3.0, 3.0, 3.0]


def test_host_tensor_copied_at_call_time(busy_fn):
    busy_fn(6)
    h = torch.ones(4)
    n = h.to("neuron")
    h.fill_(-1.0)
    assert n.tolist() == [1.0] * 4


# --- mixed devices ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn",
    [
        lambda n, c: n + c,
        lambda n, c: c + n,
        lambda n, c: torch.mm(n, c.t()),
        lambda n, c: torch.cat([n, c]),
        lambda n, c: n.add_(c),
        lambda n, c: torch.where(n > 0, n, c),
    ],
    ids=["add", "radd", "mm", "cat", "add_", "where"],
)
def test_mixed_devices_error(x, fn):
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        fn(x.neuron(), x.clone())


def test_mixed_neuron_devices_error(x, two_devices):
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device") as ei:
        x.to("neuron:0") + x.to("neuron:1")
    assert "neuron:0" in str(ei.value) and "neuron:1" in str(ei.value)


# --- data-dependent output shapes ---------------------------------------------------------

DATA_DEPENDENT = {
    "nonzero": lambda t: (t > 0).nonzero(),
    "nonzero_tuple": lambda t: torch.nonzero(t > 0.5, as_tuple=True),
    "masked_select": lambda t: t.masked_select(t > 0),
    "unique": lambda t: torch.unique(torch.round(t)),
    "unique_all": lambda t: torch.unique(
        torch.round(t), sorted=True, return_inverse=True, return_counts=True
    ),
    "unique_consecutive": lambda t: torch.unique_consecutive(torch.round(t).flatten()),
    "bool_index": lambda t: t[t > 0],
    "bool_index_rows": lambda t: t[t[:, 0] > 0],
    "bool_setitem": lambda t: t.clone().index_put_((t > 0,), torch.tensor(0.0)),
    "int_index_cpu_indices": lambda t: t[torch.tensor([3, 0, 0])],
    "argwhere": lambda t: torch.argwhere(t < 0),
    "empty_result": lambda t: t.masked_select(t > 1e9),
}


@pytest.mark.parametrize("name", list(DATA_DEPENDENT))
def test_data_dependent_ops(x, name):
    _check(DATA_DEPENDENT[name], x, exact=True)


def test_bool_index_assignment(x):
    def f(a):
        b = a.clone()
        b[b < 0] = 0.0
        b[torch.tensor([True, False, True, False], device=a.device)] *= 2
        return b

    _check(f, x)


# --- which ops ran --------------------------------------------------------------------------


def test_get_executed_ops_lists_ops_that_ran(x):
    torch_neuronx.clear_op_stats()  # other tests in this process ran other ops
    n = x.neuron()
    torch.atan2(n, n.flip(0))
    torch.logaddexp(n, n)
    N.synchronize()
    ops = torch_neuronx.get_executed_ops()
    assert isinstance(ops, list) and all(isinstance(o, str) for o in ops)
    assert all("::" in o for o in ops), ops  # namespace-qualified operator names
    assert any(o.startswith("aten::atan2") for o in ops), ops
    assert any(o.startswith("aten::logaddexp") for o in ops), ops
    assert not any(o.startswith("aten::_cdist") for o in ops), ops


def test_clear_op_stats_empties_the_lists():
    torch.ones(2, device="neuron").sinh()
    torch_neuronx.clear_op_stats()
    assert torch_neuronx.get_executed_ops() == []
    assert torch_neuronx.get_fallback_ops() == []


def test_ops_are_listed_again_after_clear(x):
    n = x.neuron()
    torch.expm1(n)
    N.synchronize()
    assert any(o.startswith("aten::expm1") for o in torch_neuronx.get_executed_ops())
    torch_neuronx.clear_op_stats()
    torch.expm1(n)
    N.synchronize()
    assert any(o.startswith("aten::expm1") for o in torch_neuronx.get_executed_ops())


def test_get_fallback_ops_is_a_list():
    ops = torch_neuronx.get_fallback_ops()
    assert isinstance(ops, list)
    assert all(isinstance(o, str) for o in ops)


@pytest.mark.parametrize("use_out", [False, True])
def test_kernel_leaving_a_conjugate_view_gives_the_values(use_out):
    # The CPU kernel of linalg_lu_solve(left=False) hands back its output as a
    # conjugate view; the device result must hold the values it stands for,
    # for a fresh output and for an out= tensor alike.
    torch.manual_seed(0)
    a = torch.randn(3, 3, dtype=torch.complex64)
    b = torch.randn(2, 3, dtype=torch.complex64)
    lu, piv = torch.linalg.lu_factor(a)
    expected = torch.linalg.lu_solve(lu, piv, b, left=False)
    args = (lu.to("neuron"), piv.to("neuron"), b.to("neuron"))
    if use_out:
        out = torch.empty(0, dtype=torch.complex64, device="neuron")
        torch.linalg.lu_solve(*args, left=False, out=out)
    else:
        out = torch.linalg.lu_solve(*args, left=False)
    assert not out.is_conj()
    torch.testing.assert_close(out.cpu(), expected.resolve_conj())
