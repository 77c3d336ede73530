"""Run-time control flow in NKI kernels: registers (nisa.register_*), NkiScalar
(nisa.scalar_load / scalar_store and traced arithmetic), nl.dynamic_range,
nl.fori_loop, nl.while_loop and nl.if_else, whose trip counts and conditions
are read from device memory when the kernel runs."""

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest

from torch_neuronx.nki.errors import NKIError

P = 128


def _count(n):
    return np.array([[n]], dtype=np.int32)


@nki.jit
def rows_add(a, b, n_tiles):
    """The first n_tiles * 128 rows of a + b, the count read at run time."""
    m, h = a.shape
    out = nl.ndarray((m, h), dtype=a.dtype, buffer=nl.shared_hbm)
    cnt = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=cnt, src=n_tiles[0])
    reg = nisa.register_alloc()
    nisa.register_load(reg, cnt)
    row = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=row, value=0)
    pattern = [[h, P], [1, h]]
    for _ in nl.dynamic_range(0, reg, 1):
        x = nl.ndarray((P, h), dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((P, h), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a.ap(pattern=pattern, offset=0, scalar_offset=row, indirect_dim=0))
        nisa.dma_copy(dst=y, src=b.ap(pattern=pattern, offset=0, scalar_offset=row, indirect_dim=0))
        z = nl.ndarray((P, h), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=z, data1=x, data2=y, op=nl.add)
        nisa.dma_copy(
            dst=out.ap(pattern=pattern, offset=0, scalar_offset=row, indirect_dim=0), src=z
        )
        nisa.tensor_scalar(dst=row, data=row, op0=nl.add, operand0=P)
    return out


def test_dynamic_range_trip_count_from_device_memory():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((512, 64)).astype(np.float32)
    b = rng.standard_normal((512, 64)).astype(np.float32)
    rows_add._cache.clear()
    us = {}
    for n in (4, 1, 3, 0, 2):
        out = nki.simulate_kernel(rows_add, a, b, _count(n))
        np.testing.assert_allclose(out[: n * P], a[: n * P] + b[: n * P], rtol=1e-6)
        us[n] = rows_add.last_profile.total_us
    # One trace serves every count: the loop is not unrolled.
    assert len(rows_add._cache) == 1
    # A host run's profile times the iterations it executed: each costs the
    # same (its four DMAs and the loop's sequencer work).
    assert us[0] < us[1] < us[2] < us[3] < us[4]
    step = us[2] - us[1]
    assert step > 1.0
    assert abs((us[4] - us[3]) - step) < 0.05 * step


@nki.jit
def fori_gather(data, ub):
    """Row i of the result = row i of data for i < ub (read at run time),
    the loop variable as an access pattern's scalar_offset; rows past ub are
    zero."""
    n, f = data.shape
    out = nl.ndarray((n, f), dtype=data.dtype, buffer=nl.shared_hbm)
    zeros = nl.zeros((n, f), dtype=data.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=out, src=zeros)
    ub_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ub_sb, src=ub)
    bound = nisa.scalar_load(ub_sb)

    def body(i):
        t = nl.ndarray((1, f), dtype=data.dtype, buffer=nl.sbuf)
        nisa.dma_copy(
            dst=t, src=data.ap(pattern=[[f, 1], [1, f]], offset=0, scalar_offset=i, indirect_dim=0)
        )
        nisa.dma_copy(
            dst=out.ap(pattern=[[f, 1], [1, f]], offset=0, scalar_offset=i, indirect_dim=0), src=t
        )

    nl.fori_loop(0, bound, body)
    return out


def test_fori_loop_with_scalar_bound_and_loop_variable_offset():
    data = np.arange(8 * 16, dtype=np.float32).reshape(8, 16) + 1
    for ub in (8, 3, 0):
        out = nki.simulate_kernel(fori_gather, data, _count(ub))
        expect = np.where(np.arange(8)[:, None] < ub, data, 0)
        np.testing.assert_array_equal(out, expect)


@nki.jit
def countdown_sum(start):
    """while_loop: acc += r while r != 0, r -= 1 (sum 1..start), the
    condition an NkiScalar read at run time."""
    s_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=s_sb, src=start)
    acc = nl.zeros((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    r_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    rf = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)

    def body(r):
        nisa.scalar_store(r_sb, r)
        nisa.tensor_copy(dst=rf, src=r_sb)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=rf, op=nl.add)
        return r - 1

    nl.while_loop(nisa.scalar_load(s_sb), body)
    out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_while_loop_condition_from_device_memory():
    for n in (5, 1, 0, 12):
        out = nki.simulate_kernel(countdown_sum, _count(n))
        assert out[0, 0] == n * (n + 1) / 2


@nki.jit
def branchy(flag, data):
    """if_else on a value read at run time: +10 when flag > 0, else -10."""
    flag_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=flag_sb, src=flag)
    cond = nisa.scalar_load(flag_sb) > 0
    t = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=data)

    def then_branch():
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=10.0)

    def else_branch():
        nisa.tensor_scalar(dst=t, data=t, op0=nl.subtract, operand0=10.0)

    nl.if_else(cond, then_branch, else_branch)
    out = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_if_else_on_a_run_time_value():
    data = np.linspace(-1, 1, 32 * 8, dtype=np.float32).reshape(32, 8)
    for flag, delta in ((3, 10.0), (0, -10.0), (-4, -10.0), (1, 10.0)):
        out = nki.simulate_kernel(branchy, _count(flag), data)
        np.testing.assert_allclose(out, data + delta)


@nki.jit
def scalar_math(index):
    """NkiScalar arithmetic (traced, evaluated on the device): i * 4 + 1,
    and register_move / register_store."""
    idx = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=index)
    i = nisa.scalar_load(idx)
    j = i * 4 + 1
    res = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.sbuf)
    nisa.scalar_store(res[0:1, 0:1], j)
    nisa.scalar_store(res[0:1, 1:2], 100 - i)
    reg = nisa.register_alloc(7)
    nisa.register_store(res[0:1, 2:3], reg)
    nisa.register_move(reg, i)
    nisa.register_store(res[0:1, 3:4], reg)
    out = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_scalar_arithmetic_and_register_moves():
    out = nki.simulate_kernel(scalar_math, _count(6))
    np.testing.assert_array_equal(out, [[25, 94, 7, 6]])
    # int32 arithmetic wraps (NKI's scalars never widen).
    out = nki.simulate_kernel(scalar_math, _count(2**30))
    assert out[0, 0] == np.int32(np.int64(2**32) + 1 - 2**32)


@nki.jit
def nested(outer, inner):
    """A dynamic loop in a dynamic loop: counts outer * inner in SBUF."""
    o_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    i_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=o_sb, src=outer)
    nisa.dma_copy(dst=i_sb, src=inner)
    ro, ri = nisa.register_alloc(), nisa.register_alloc()
    nisa.register_load(ro, o_sb)
    nisa.register_load(ri, i_sb)
    acc = nl.zeros((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    for _ in nl.dynamic_range(ro):
        for _ in nl.dynamic_range(ri):
            nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=1.0)
    out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_nested_dynamic_loops():
    for o, i in ((3, 4), (0, 5), (2, 0), (1, 1)):
        assert nki.simulate_kernel(nested, _count(o), _count(i))[0, 0] == o * i


def test_loop_cost_counts_iterations():
    # Constant bounds: the cost model times every iteration (the body's DMA
    # eight times), plus the per-iteration sequencer work.
    @nki.jit
    def const_loop(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)

        def body(i):
            nisa.dma_copy(dst=t, src=a)

        nl.fori_loop(0, 8, body)
        nisa.dma_copy(dst=out, src=t)
        return out

    @nki.jit
    def once(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        return out

    a = np.ones((128, 512), np.float32)
    nki.simulate_kernel(const_loop, a)
    looped = const_loop.last_profile
    nki.simulate_kernel(once, a)
    single = once.last_profile
    assert looped.total_us > single.total_us * 3


def test_loop_carried_tile_keeps_its_memory():
    # A tile written before the loop and read in every iteration must not
    # share memory with the body's tiles (the memory plan keeps it live).
    @nki.jit
    def carried(a, n):
        n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=n_sb, src=n)
        keep = nl.ndarray((P, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=keep, src=a)
        acc = nl.zeros((P, 64), dtype=nl.float32, buffer=nl.sbuf)
        for _ in nl.dynamic_range(nisa.scalar_load(n_sb)):
            tmp = nl.ndarray((P, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=tmp, data=keep, op0=nl.multiply, operand0=2.0)
            nisa.tensor_tensor(dst=acc, data1=acc, data2=tmp, op=nl.add)
        out = nl.ndarray((P, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=acc)
        return out

    a = np.random.default_rng(1).standard_normal((P, 64)).astype(np.float32)
    for n in (3, 1):
        np.testing.assert_allclose(nki.simulate_kernel(carried, a, _count(n)), 2 * n * a, rtol=1e-5)


# Errors ---------------------------------------------------------------------
def test_unloaded_register_is_an_error():
    @nki.jit
    def k(a):
        reg = nisa.register_alloc()
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for _ in nl.dynamic_range(reg):
            nisa.dma_copy(dst=out, src=a)
        return out

    with pytest.raises(NKIError, match="read before anything was written") as e:
        nki.simulate_kernel(k, np.ones((4, 4), np.float32))
    assert e.value.limit == "register"
    assert e.value.lineno is not None


def test_register_load_of_a_non_scalar_is_an_error():
    @nki.jit
    def k(a):
        t = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        reg = nisa.register_alloc()
        nisa.register_load(reg, t)
        return a

    with pytest.raises(NKIError, match="exactly one element"):
        nki.simulate_kernel(k, np.ones((1, 4), np.int32))

    @nki.jit
    def k2(a):
        nisa.register_load(nisa.register_alloc(), 3)
        return a

    with pytest.raises(NKIError, match="exactly one element"):
        nki.simulate_kernel(k2, np.ones((1, 4), np.int32))


def test_scalar_has_no_python_value_while_traced():
    @nki.jit
    def k(a):
        t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        s = nisa.scalar_load(t)
        if s:
            pass
        return a

    with pytest.raises(TypeError, match="no truth value"):
        nki.simulate_kernel(k, _count(1))

    @nki.jit
    def k2(a):
        t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        for _ in range(nisa.scalar_load(t)):
            pass
        return a

    with pytest.raises(TypeError, match="int"):
        nki.simulate_kernel(k2, _count(1))


def test_bad_loop_arguments():
    @nki.jit
    def k(a):
        for _ in nl.dynamic_range(0, 4, 0):
            pass
        return a

    with pytest.raises(NKIError, match="step must be a positive"):
        nki.simulate_kernel(k, _count(1))

    @nki.jit
    def k2(a):
        t = nl.ndarray((1, 1), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nl.while_loop(nisa.scalar_load(t), lambda r: r)
        return a

    with pytest.raises(NKIError, match="signed 32-bit"):
        nki.simulate_kernel(k2, np.ones((1, 1), np.uint32))


def test_tensor_handle_truth_value():
    # An allocated tensor is a handle: true (NKI-lib tests optional tensors
    # so); a computed tile's truth would be about its data: an error.
    @nki.jit
    def k(a):
        t = nl.ndarray((P, 4), dtype=nl.float32, buffer=nl.sbuf)
        assert t
        nisa.dma_copy(dst=t, src=a)
        if nl.greater(t, 0.0):
            pass
        return a

    with pytest.raises(NKIError, match="computed tile has no truth value"):
        nki.simulate_kernel(k, np.ones((P, 4), np.float32))


def test_lnc2_dynamic_loop_each_core():
    # Each core of an LNC=2 launch runs its own loop (its half of the rows);
    # the loops stay whole when the two cores' instructions are merged.
    @nki.jit
    def halves(a, n):
        m, h = a.shape
        out = nl.ndarray((m, h), dtype=a.dtype, buffer=nl.shared_hbm)
        core = nl.program_id(0)
        n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=n_sb, src=n)
        row = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=row, value=core * (m // 2))
        for _ in nl.dynamic_range(nisa.scalar_load(n_sb)):
            t = nl.ndarray((1, h), dtype=a.dtype, buffer=nl.sbuf)
            pat = [[h, 1], [1, h]]
            nisa.dma_copy(dst=t, src=a.ap(pattern=pat, offset=0, scalar_offset=row, indirect_dim=0))
            nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=3.0)
            nisa.dma_copy(
                dst=out.ap(pattern=pat, offset=0, scalar_offset=row, indirect_dim=0), src=t
            )
            nisa.tensor_scalar(dst=row, data=row, op0=nl.add, operand0=1)
        return out

    a = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    out = nki.simulate_kernel(halves[2], a, _count(4))
    np.testing.assert_array_equal(out, 3 * a)


def test_device_tensors_and_compile():
    torch = pytest.importorskip("torch")
    import torch_neuronx  # noqa: F401
    from torch_neuronx import wrap_nki

    a = torch.randn(512, 64)
    b = torch.randn(512, 64)
    dev = "neuron"
    ad, bd = a.to(dev), b.to(dev)
    for n in (2, 4):
        out = rows_add(ad, bd, torch.tensor([[n]], dtype=torch.int32, device=dev))
        torch.testing.assert_close(out.cpu()[: n * P], (a + b)[: n * P])

    @torch.compile(fullgraph=True)
    def f(x, y, n):
        return wrap_nki(rows_add)(x, y, n) * 1.0

    for n in (1, 3):
        out = f(ad, bd, torch.tensor([[n]], dtype=torch.int32, device=dev))
        torch.testing.assert_close(out.cpu()[: n * P], (a + b)[: n * P])


@nki.jit
def ds_copy(data, ub):
    """Rows below ub (read at run time) copied with the loop variable as an
    nl.ds start and as a direct index; the other rows zero."""
    n, f = data.shape
    out = nl.ndarray((n, f), dtype=data.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=nl.zeros((n, f), dtype=data.dtype, buffer=nl.sbuf))
    u = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=u, src=ub)

    def body(i):
        t = nl.ndarray((1, f), dtype=data.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=data[nl.ds(i, 1), :])
        nisa.dma_copy(dst=out[i, :], src=t)

    nl.fori_loop(0, nisa.scalar_load(u), body)
    return out


def test_scalar_as_ds_start_and_index():
    data = np.arange(32, dtype=np.float32).reshape(8, 4) + 1
    for ub in (5, 8):
        out = nki.simulate_kernel(ds_copy, data, _count(ub))
        np.testing.assert_array_equal(out, np.where(np.arange(8)[:, None] < ub, data, 0))


def test_break_in_a_dynamic_loop_is_an_error():
    @nki.jit
    def k(a):
        for _ in nl.dynamic_range(4):
            nisa.dma_copy(dst=a, src=a)
            break
        return a

    with pytest.raises(NKIError, match="break"):
        nki.simulate_kernel(k, np.ones((4, 4), np.float32))


@nki.jit
def scale_in_place(x, n):
    """x *= 2, n times (n read at run time), written in place inside the loop."""
    n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=n_sb, src=n)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    for _ in nl.dynamic_range(nisa.scalar_load(n_sb)):
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=x, src=t)


def test_argument_written_in_a_dynamic_loop_under_compile():
    # The body is traced once whatever the count, so the launch knows the
    # argument it writes (torch.compile declares it mutated).
    torch = pytest.importorskip("torch")
    from torch_neuronx import wrap_nki

    @torch.compile(fullgraph=True)
    def f(x, n):
        wrap_nki(scale_in_place)(x, n)
        return x + 0

    for k in (0, 3):
        x = torch.ones(16, 8, device="neuron")
        out = f(x, torch.tensor([[k]], dtype=torch.int32, device="neuron"))
        torch.testing.assert_close(out.cpu(), torch.full((16, 8), 2.0**k))
        torch.testing.assert_close(x.cpu(), torch.full((16, 8), 2.0**k))
