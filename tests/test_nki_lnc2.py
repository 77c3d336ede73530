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
from kernel_source import line_of

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
    core's 224 KiB SBUF); both live across the barrier."""
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


def test_one_cores_sbuf_still_holds_224_kib():
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
def both_cores_zero_then_write_their_half(x, out, barrier):
    # Each core zero-fills all of `out` (as a library's initialisation does
    # when one shard covers everything), then writes its own half. Without a
    # barrier between, core 0's zero-fill of the second half and core 1's
    # write of it race: the result depends on timing.
    P, F = x.shape[0] // 2, x.shape[1]
    c = nl.program_id(0)
    z = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(z, value=0.0)
    nisa.dma_copy(dst=out[0:P, :], src=z)
    nisa.dma_copy(dst=out[P : 2 * P, :], src=z)
    if barrier:
        nisa.core_barrier(out, (0, 1))
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[nl.ds(c * P, P), :])
    nisa.dma_copy(dst=out[nl.ds(c * P, P), :], src=t)
    nisa.core_barrier(out, (0, 1))
    return out


def test_a_write_racing_the_other_cores_write_is_an_error():
    x = RNG.random((256, 16)).astype(np.float32)
    with pytest.raises(NKIError) as e:
        both_cores_zero_then_write_their_half[2](x, np.zeros_like(x), False)
    fn = both_cores_zero_then_write_their_half.fn
    assert e.value.limit == "hbm-race", str(e.value)
    # Reported at one core's line, naming the other's: core 1's write of its
    # half against core 0's zero-fill of it (or the zero-fills themselves).
    lines = {
        line_of(fn, "dst=out[0:P, :]"),
        line_of(fn, "dst=out[P : 2 * P, :]"),
        line_of(fn, "dst=out[nl.ds(c * P, P), :]"),
    }
    assert e.value.lineno in lines, str(e.value)
    msg = str(e.value)
    assert "race on shared HBM: core 1 writes hbm" in msg, msg
    assert "while core 0 writes it at test_nki_lnc2.py:" in msg, msg
    other = int(msg.split("while core 0 writes it at test_nki_lnc2.py:")[1].split(",")[0])
    assert other in lines, msg


def test_the_same_writes_ordered_by_a_barrier_are_fine():
    x = RNG.random((256, 16)).astype(np.float32)
    got = both_cores_zero_then_write_their_half[2](x, np.zeros_like(x), True)
    np.testing.assert_array_equal(got, x)


@nki.jit
def core_1_reads_what_core_0_writes(a, barrier):
    n, m = a.shape
    core = nl.program_id(0)
    scratch = nl.ndarray((n, m), dtype=a.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray((n, m), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((n, m), dtype=a.dtype, buffer=nl.sbuf)
    if core == 0:
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=scratch, src=t)  # core 0 writes
    if barrier:
        nisa.core_barrier(scratch, (0, 1))
    if core == 1:
        nisa.dma_copy(dst=t, src=scratch)  # core 1 reads
        nisa.dma_copy(dst=out, src=t)
    return out


def test_a_read_racing_the_other_cores_write_names_both_lines():
    a = RNG.random((128, 32)).astype(np.float32)
    with pytest.raises(NKIError) as e:
        core_1_reads_what_core_0_writes[2](a, False)
    fn = core_1_reads_what_core_0_writes.fn
    assert e.value.limit == "hbm-race"
    assert e.value.lineno == line_of(fn, "src=scratch)  # core 1 reads")
    write_line = line_of(fn, "dst=scratch, src=t)  # core 0 writes")
    assert f"while core 0 writes it at test_nki_lnc2.py:{write_line}," in str(e.value)
    assert "core 1 reads hbm" in str(e.value)
    got = core_1_reads_what_core_0_writes[2](a, True)
    np.testing.assert_array_equal(got, a)


@nki.jit
def interleaved_rows(a):
    # Core c writes rows c, c + 2, c + 4, ... of one shared tensor in one
    # strided access: the two cores' rows interleave but never meet.
    n, m = a.shape
    core = nl.program_id(0)
    out = nl.ndarray((n, m), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((n // 2, m), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a.ap(pattern=[[2 * m, n // 2], [1, m]], offset=core * m))
    nisa.dma_copy(dst=out.ap(pattern=[[2 * m, n // 2], [1, m]], offset=core * m), src=t)
    return out


def test_interleaved_accesses_that_never_meet_do_not_race():
    a = RNG.random((256, 8)).astype(np.float32)
    np.testing.assert_array_equal(interleaved_rows[2](a), a)


@nki.jit
def both_cores_store_a_result(a, per_core):
    # Each core computes exp(a) and stores all of it (a kernel that does not
    # shard its work: both cores write the same bytes, in either order the
    # same result). With per_core, each core reads its own row first: the
    # same store then writes different values, a race.
    n, m = a.shape
    out = nl.ndarray((1, m), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((1, m), dtype=a.dtype, buffer=nl.sbuf)
    row = nl.program_id(0) if per_core else 0
    nisa.dma_copy(dst=t, src=a[row : row + 1, :])
    e = nl.ndarray((1, m), dtype=a.dtype, buffer=nl.sbuf)
    nisa.activation(dst=e, op=nl.exp, data=t)
    nisa.dma_copy(dst=out, src=e)  # the store
    return out


def test_both_cores_storing_the_same_values_is_no_race():
    a = RNG.random((2, 64)).astype(np.float32)
    np.testing.assert_allclose(both_cores_store_a_result[2](a, False)[0], np.exp(a[0]), rtol=1e-6)
    with pytest.raises(NKIError) as e:
        both_cores_store_a_result[2](a, True)
    assert e.value.limit == "hbm-race"
    assert e.value.lineno == line_of(both_cores_store_a_result.fn, "# the store")


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


def test_copies_of_the_same_bytes_are_not_races():
    """Both cores copy one input into a shared tensor and read it back (NKI-lib
    does, unsharded), and a copy of a tensor onto itself: the bytes read are
    the same whichever core's store lands first. A read of elements the
    reader's core did not store itself still races."""

    @nki.jit
    def twice(x):
        shared = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=shared, src=x)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=shared)
        nisa.dma_copy(dst=out, src=t)
        nisa.dma_copy(dst=out, src=out)
        return out

    x = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)
    np.testing.assert_array_equal(twice[2](x), x)

    @nki.jit
    def half_then_all(x):
        shared = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        c = nl.program_id(0)
        nisa.dma_copy(dst=shared[c * 64 : c * 64 + 64, :], src=x[c * 64 : c * 64 + 64, :])
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=shared)  # the other core's half: unordered
        nisa.dma_copy(dst=out, src=t)
        return out

    with pytest.raises(NKIError, match="race on shared HBM"):
        half_then_all[2](x)


def test_race_check_mode(monkeypatch):
    """TORCH_NEURONX_NKI_HBM_RACES=warn reports the race as a warning and runs
    the kernel; off skips the check; anything else is a clear error. The mode
    applies when a kernel is traced (its first call per signature)."""

    @nki.jit
    def both_write(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        c = nl.program_id(0)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=c * 1.0)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = np.ones((128, 4), dtype=np.float32)
    with pytest.raises(NKIError, match="race on shared HBM"):
        both_write[2](x)
    monkeypatch.setenv("TORCH_NEURONX_NKI_HBM_RACES", "warn")
    with pytest.warns(RuntimeWarning, match="race on shared HBM"):
        out = both_write[2](x)
    # One core's store lands last (which is what a race leaves undecided).
    assert np.array_equal(out, x) or np.array_equal(out, x + 1)
    monkeypatch.setenv("TORCH_NEURONX_NKI_HBM_RACES", "off")
    assert both_write[2](x).shape == x.shape
    monkeypatch.setenv("TORCH_NEURONX_NKI_HBM_RACES", "sometimes")
    with pytest.raises(ValueError, match="TORCH_NEURONX_NKI_HBM_RACES"):
        both_write[2](np.ones((128, 8), dtype=np.float32))  # a new trace: checked
