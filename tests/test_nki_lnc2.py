"""Logical NeuronCores of two physical cores (LNC=2): ``kernel[2]`` traces the
two cores interleaved at ``nisa.core_barrier``, ``nisa.sendrecv`` exchanges
tiles between them, and each core's tiles count against its own SBUF/PSUM.
The kernels are written here in the NKI docs' style."""

import threading

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch

from torch_neuronx.nki import NKIError

RNG = np.random.default_rng(7)


# Each core writes its half of a shared HBM tensor, the barrier, then each
# reads the half the other core wrote.
@nki.jit
def swap_halves_through_hbm(a):
    n, m = a.shape
    half = n // 2
    scratch = nl.ndarray((n, m), dtype=a.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray((n, m), dtype=a.dtype, buffer=nl.shared_hbm)
    core = nl.program_id(0)
    mine = nl.ndarray((half, m), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=a[core * half : (core + 1) * half, :])
    doubled = nl.ndarray((half, m), dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=doubled, data=mine, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=scratch[core * half : (core + 1) * half, :], src=doubled)
    nisa.core_barrier(scratch, (0, 1))
    other = 1 - core
    theirs = nl.ndarray((half, m), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=theirs, src=scratch[other * half : (other + 1) * half, :])
    nisa.dma_copy(dst=out[core * half : (core + 1) * half, :], src=theirs)
    return out


def _swapped(a):
    half = a.shape[0] // 2
    return np.concatenate([a[half:], a[:half]]) * 2


def test_barrier_orders_the_cores_writes_before_their_reads():
    a = RNG.random((256, 64)).astype(np.float32)
    np.testing.assert_allclose(swap_halves_through_hbm[2](a), _swapped(a))


def test_barrier_with_nc_grid_and_on_neuron_tensors():
    a = torch.rand(256, 32, device="neuron")
    out = swap_halves_through_hbm[nl.nc(2)](a)
    np.testing.assert_allclose(out.cpu().numpy(), _swapped(a.cpu().numpy()))


@nki.jit
def barrier_alone(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.dma_copy(dst=out, src=t)
    nisa.core_barrier(out, (0,))
    return out


def test_barrier_of_one_core_and_at_lnc1_orders_nothing():
    a = RNG.random((128, 16)).astype(np.float32)
    np.testing.assert_array_equal(barrier_alone(a), a)
    np.testing.assert_array_equal(barrier_alone[1](a), a)


@nki.jit
def all_reduce_by_sendrecv(a):
    """Each core holds one half of ``a`` (rows); after the exchange both add
    the other's half: the sum of the halves, written by core 0 to the top
    half of the result and by core 1 to the bottom."""
    n, m = a.shape
    half = n // 2
    core = nl.program_id(0)
    out = nl.ndarray((n, m), dtype=a.dtype, buffer=nl.shared_hbm)
    mine = nl.ndarray((half, m), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=a[core * half : (core + 1) * half, :])
    recv = nl.ndarray((half, m), dtype=a.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=recv, send_to_rank=1 - core, recv_from_rank=1 - core, pipe_id=0)
    total = nl.ndarray((half, m), dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=total, data1=mine, data2=recv, op=nl.add)
    nisa.dma_copy(dst=out[core * half : (core + 1) * half, :], src=total)
    return out


def test_sendrecv_exchanges_tiles_between_the_cores():
    a = RNG.random((256, 48)).astype(np.float32)
    s = a[:128] + a[128:]
    np.testing.assert_allclose(all_reduce_by_sendrecv[2](a), np.concatenate([s, s]), rtol=1e-6)


@nki.jit
def sendrecv_in_place(a):
    """Each core sends its tile and receives into the same tile."""
    n, m = a.shape
    half = n // 2
    core = nl.program_id(0)
    out = nl.ndarray((n, m), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((half, m), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a[core * half : (core + 1) * half, :])
    nisa.sendrecv(
        src=t,
        dst=t,
        send_to_rank=1 - core,
        recv_from_rank=1 - core,
        pipe_id=0,
        dma_engine=nisa.dma_engine.gpsimd_dma,  # NKI 0.8's low-latency SB-to-SB path
    )
    nisa.dma_copy(dst=out[core * half : (core + 1) * half, :], src=t)
    return out


def test_sendrecv_into_the_sent_tile_swaps():
    a = RNG.random((64, 8)).astype(np.float32)
    np.testing.assert_array_equal(sendrecv_in_place[2](a), np.concatenate([a[32:], a[:32]]))


@nki.jit
def several_exchanges(a):
    """Three sendrecvs in a loop with a barrier in between: they pair in
    program order."""
    n, m = a.shape
    core = nl.program_id(0)
    out = nl.ndarray((2 * n, m), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((n, m), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    if core == 1:
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=100.0)
    for _ in range(3):
        r = nl.ndarray((n, m), dtype=a.dtype, buffer=nl.sbuf)
        nisa.sendrecv(src=t, dst=r, send_to_rank=1 - core, recv_from_rank=1 - core, pipe_id=0)
        nisa.tensor_scalar(dst=t, data=r, op0=nl.add, operand0=1.0)
        nisa.core_barrier(out, (0, 1))
    nisa.dma_copy(dst=out[core * n : (core + 1) * n, :], src=t)
    return out


def test_sendrecv_and_barriers_pair_in_program_order():
    a = RNG.random((32, 8)).astype(np.float32)
    out = several_exchanges[2](a)
    # Three swaps: each core ends with the other's start value, plus 3.
    np.testing.assert_allclose(out[:32], a + 100 + 3, rtol=1e-6)
    np.testing.assert_allclose(out[32:], a + 3, rtol=1e-6)


# Errors ---------------------------------------------------------------------
@nki.jit
def barrier_on_core_0_only(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    if nl.program_id(0) == 0:
        nisa.core_barrier(out, (0, 1))  # the unmatched barrier
    nisa.dma_copy(dst=out, src=t)
    return out


def test_barrier_the_other_core_never_reaches_is_a_deadlock_at_its_line():
    a = RNG.random((128, 8)).astype(np.float32)
    before = threading.active_count()
    with pytest.raises(NKIError, match="deadlock") as e:
        barrier_on_core_0_only[2](a)
    assert "no match" in str(e.value) and "core 0" in str(e.value)
    lines = open(__file__).read().splitlines()
    assert lines[e.value.lineno - 1].strip().endswith("# the unmatched barrier")
    assert threading.active_count() == before


@nki.jit
def barrier_meets_sendrecv(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    core = nl.program_id(0)
    if core == 0:
        nisa.core_barrier(out, (0, 1))
    else:
        nisa.sendrecv(src=t, dst=t, send_to_rank=0, recv_from_rank=0, pipe_id=0)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_barrier_meeting_a_sendrecv_is_an_error():
    with pytest.raises(NKIError, match="meets nisa.core_barrier on core 0"):
        barrier_meets_sendrecv[2](RNG.random((128, 8)).astype(np.float32))


@nki.jit
def mismatched_sendrecv(a):
    core = nl.program_id(0)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((64, 8), dtype=a.dtype, buffer=nl.sbuf)
    r = nl.ndarray((64, 16), dtype=a.dtype, buffer=nl.sbuf)  # receives [64, 8]
    nisa.memset(dst=t, value=1.0)
    nisa.sendrecv(src=t, dst=r, send_to_rank=1 - core, recv_from_rank=1 - core, pipe_id=0)
    nisa.dma_copy(dst=out[:, 0:8], src=t[:, 0:8])
    return out


def test_sendrecv_of_mismatched_shapes_is_an_error():
    with pytest.raises(NKIError, match="shapes and dtypes must match"):
        mismatched_sendrecv[2](np.zeros((64, 16), np.float32))


@nki.jit
def sendrecv_without_lnc(a):
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=t, dst=t, send_to_rank=1, recv_from_rank=1, pipe_id=0)
    return a


def test_sendrecv_needs_an_lnc2_launch():
    with pytest.raises(NKIError, match="LNC=2 launch"):
        sendrecv_without_lnc(np.zeros((8, 8), np.float32))


@nki.jit
def core_1_fails(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.core_barrier(out, (0, 1))
    if nl.program_id(0) == 1:
        raise ValueError("core 1 trips")
    nisa.core_barrier(out, (0, 1))
    return out


def test_an_exception_on_one_core_propagates_and_no_thread_is_left():
    before = threading.active_count()
    with pytest.raises(ValueError, match="core 1 trips"):
        core_1_fails[2](np.zeros((8, 8), np.float32))
    assert threading.active_count() == before


# Per-core SBUF ----------------------------------------------------------------
@nki.jit
def big_tile_per_core(a):
    """A 120 KiB-per-partition tile on each core (two would not fit one
    core's 192 KiB SBUF); both live across the barrier."""
    n, m = a.shape
    core = nl.program_id(0)
    out = nl.ndarray((2 * n, m), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((n, m), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.core_barrier(out, (0, 1))
    nisa.dma_copy(dst=out[core * n : (core + 1) * n, :], src=t)
    return out


def test_each_core_has_its_own_sbuf():
    a = RNG.random((128, 120 * 1024 // 4)).astype(np.float32)
    out = big_tile_per_core[2](a)
    np.testing.assert_array_equal(out[:128], a)
    np.testing.assert_array_equal(out[128:], a)


@nki.jit
def two_big_tiles_on_one_core(a):
    n, m = a.shape
    out = nl.ndarray((2 * n, m), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((n, m), dtype=a.dtype, buffer=nl.sbuf)
    u = nl.ndarray((n, m), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.dma_copy(dst=u, src=a)
    if nl.program_id(0) == 0:
        nisa.dma_copy(dst=out[0:n, :], src=t)
        nisa.dma_copy(dst=out[n : 2 * n, :], src=u)
    nisa.core_barrier(out, (0, 1))
    return out


def test_one_cores_sbuf_still_holds_192_kib():
    a = RNG.random((128, 120 * 1024 // 4)).astype(np.float32)
    with pytest.raises(NKIError, match="SBUF capacity exceeded on core 0"):
        two_big_tiles_on_one_core[2](a)


def test_grid_launches_that_are_not_lnc_keep_one_sbuf():
    # Four programs, traced in turn on one simulated core: today's behaviour.
    a = RNG.random((128, 120 * 1024 // 4)).astype(np.float32)

    @nki.jit
    def two_programs_live(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        return out

    np.testing.assert_array_equal(two_programs_live[4](a), a)


# Cost ---------------------------------------------------------------------------
@nki.jit
def vector_work(a):
    """Each program: 16 Vector-engine ops on its own tile."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    for _ in range(16):
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
    if nl.program_id(0) == 0:
        nisa.dma_copy(dst=out, src=t)
    return out


def test_the_two_cores_engines_are_timed_separately():
    a = RNG.random((128, 2048)).astype(np.float32)
    vector_work[1](a)
    one = vector_work.last_profile.total_us
    vector_work[2](a)
    two = vector_work.last_profile.total_us
    # Two programs on two cores' Vector engines take about as long as one,
    # not twice as long (a grid of two programs that is not LNC: one core).
    assert two < 1.2 * one
    vector_work[2, 1](a)
    assert vector_work.last_profile.total_us > 1.4 * one


@nki.jit
def both_cores_zero_then_write_their_half(x, out):
    # Each core zero-fills all of `out` (as a library's initialisation does
    # when one shard covers everything), then writes its own half, then a
    # barrier. On hardware both start together, so both zero-fills come
    # before either half's write: the result is x.
    P, F = x.shape[0] // 2, x.shape[1]
    c = nl.program_id(0)
    z = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(z, value=0.0)
    nisa.dma_copy(dst=out[0:P, :], src=z)
    nisa.dma_copy(dst=out[P : 2 * P, :], src=z)
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[nl.ds(c * P, P), :])
    nisa.dma_copy(dst=out[nl.ds(c * P, P), :], src=t)
    nisa.core_barrier(out, (0, 1))
    return out


def test_the_cores_run_an_epoch_together_not_one_after_the_other():
    x = RNG.random((256, 16)).astype(np.float32)
    got = both_cores_zero_then_write_their_half[2](x, np.zeros_like(x))
    np.testing.assert_array_equal(got, x)


@nki.jit
def each_core_copies_the_identity(a):
    # Core 0 does more work before asking for the identity than core 1: with
    # one copy built by core 0 only, core 1 would read it before it is built.
    n = a.shape[1]
    core = nl.program_id(0)
    out = nl.ndarray((2, n, n), dtype=nl.float32, buffer=nl.shared_hbm)
    if core == 0:
        for _ in range(3):
            scratch = nl.ndarray((n, n), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=scratch, value=1.0)
    ident = nl.shared_identity_matrix(n, dtype=nl.float32)
    nisa.dma_copy(dst=out[core], src=ident)
    return out


def test_each_core_builds_the_shared_constants_it_reads():
    got = each_core_copies_the_identity[2](np.zeros((1, 32), dtype=np.float32))
    np.testing.assert_array_equal(got, np.stack([np.eye(32, dtype=np.float32)] * 2))
