"""nki.collectives: kernels launched on several ranks (nki.collectives.run_ranks),
their collectives checked against NumPy, and the errors for collectives that
cannot meet."""

import nki
import nki.collectives as ncc
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
from nki.collectives import ReplicaGroup

from torch_neuronx.nki import NKIError


def _launch(kernel, lnc):
    return kernel[lnc] if lnc > 1 else kernel


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _my_part(n):
    """This core's part of n (at LNC=2 each core takes half, as NKI-lib's
    kernels split their work: the two cores of a rank share its HBM)."""
    cores = nl.num_programs(0) if nl.program_ndim() else 1
    c = nl.program_id(0) if cores > 1 else 0
    return slice(c * n // cores, (c + 1) * n // cores)


@nki.jit
def all_reduce_kernel(x, group, op):
    cols = _my_part(x.shape[1])
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src[:, cols], src=x[:, cols])
    ncc.all_reduce(srcs=[src[:, cols]], dsts=[dst[:, cols]], replica_group=group, op=op)
    nisa.dma_copy(dst=out[:, cols], src=dst[:, cols])
    return out


@pytest.mark.parametrize("lnc", [1, 2])
@pytest.mark.parametrize("nranks", [2, 4])
def test_all_reduce_sums_every_rank(lnc, nranks):
    xs = [_rand(128, 64, seed=r) for r in range(nranks)]
    group = ReplicaGroup([list(range(nranks))])
    outs = ncc.run_ranks(_launch(all_reduce_kernel, lnc), [(x, group, nl.add) for x in xs])
    want = sum(xs)
    for o in outs:
        np.testing.assert_allclose(o, want, rtol=1e-6, atol=1e-6)


def test_all_reduce_max_within_each_rank_list():
    xs = [_rand(32, 16, seed=r) for r in range(4)]
    group = ReplicaGroup([[0, 2], [1, 3]])
    outs = ncc.run_ranks(all_reduce_kernel, [(x, group, nl.maximum) for x in xs])
    np.testing.assert_array_equal(outs[0], np.maximum(xs[0], xs[2]))
    np.testing.assert_array_equal(outs[2], np.maximum(xs[0], xs[2]))
    np.testing.assert_array_equal(outs[1], np.maximum(xs[1], xs[3]))
    np.testing.assert_array_equal(outs[3], np.maximum(xs[1], xs[3]))


@nki.jit
def all_reduce_in_place_kernel(x, group):
    buf = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=buf, src=x)
    ncc.all_reduce(srcs=[buf], dsts=[buf], replica_group=group, op=nl.add)
    nisa.dma_copy(dst=out, src=buf)
    return out


def test_all_reduce_in_place_reads_every_source_first():
    xs = [_rand(16, 8, seed=r) for r in range(3)]
    group = ReplicaGroup([[0, 1, 2]])
    outs = ncc.run_ranks(all_reduce_in_place_kernel, [(x, group) for x in xs])
    for o in outs:
        np.testing.assert_allclose(o, xs[0] + xs[1] + xs[2], rtol=1e-6, atol=1e-6)


@nki.jit
def sbuf_all_gather_kernel(x, group, n):
    H, W = x.shape
    rows = _my_part(H)
    h = rows.stop - rows.start
    t = nl.ndarray((h, W), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[rows, :])
    g = nl.ndarray((h, W * n), dtype=x.dtype, buffer=nl.sbuf)
    ncc.all_gather(srcs=[t], dsts=[g], replica_group=group, collective_dim=1)
    out = nl.ndarray((H, W * n), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[rows, :], src=g)
    return out


@nki.jit
def hbm_all_gather_kernel(x, group, n):
    H, W = x.shape
    cols = _my_part(W)
    src = nl.ndarray((H, W), dtype=x.dtype, buffer=nl.shared_hbm)
    dst = nl.ndarray((H * n, W), dtype=x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray((H * n, W), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src[:, cols], src=x[:, cols])
    ncc.all_gather(srcs=[src[:, cols]], dsts=[dst[:, cols]], replica_group=group, collective_dim=0)
    nisa.dma_copy(dst=out[:, cols], src=dst[:, cols])
    return out


@pytest.mark.parametrize("lnc", [1, 2])
def test_all_gather_sbuf_and_hbm(lnc):
    xs = [_rand(64, 32, seed=r).astype(nl.bfloat16) for r in range(4)]
    group = ReplicaGroup([[0, 1, 2, 3]])
    outs = ncc.run_ranks(_launch(sbuf_all_gather_kernel, lnc), [(x, group, 4) for x in xs])
    for o in outs:
        np.testing.assert_array_equal(o, np.concatenate(xs, axis=1))
    outs = ncc.run_ranks(_launch(hbm_all_gather_kernel, lnc), [(x, group, 4) for x in xs])
    for o in outs:
        np.testing.assert_array_equal(o, np.concatenate(xs, axis=0))


@nki.jit
def reduce_scatter_kernel(x, group, n):
    H, W = x.shape
    src = nl.ndarray((H, W), dtype=x.dtype, buffer=nl.shared_hbm)
    dst = nl.ndarray((H // n, W), dtype=x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray((H // n, W), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    ncc.reduce_scatter(srcs=[src], dsts=[dst], replica_group=group, op=nl.add, collective_dim=0)
    nisa.dma_copy(dst=out, src=dst)
    return out


@nki.jit
def all_to_all_kernel(x, group):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    ncc.all_to_all(srcs=[src], dsts=[dst], replica_group=group, collective_dim=0)
    nisa.dma_copy(dst=out, src=dst)
    return out


def test_reduce_scatter_and_all_to_all():
    n = 4
    xs = [_rand(8 * n, 16, seed=r) for r in range(n)]
    group = ReplicaGroup([list(range(n))])
    outs = ncc.run_ranks(reduce_scatter_kernel, [(x, group, n) for x in xs])
    total = sum(xs)
    for r, o in enumerate(outs):
        np.testing.assert_allclose(o, total[8 * r : 8 * (r + 1)], rtol=1e-5, atol=1e-5)
    outs = ncc.run_ranks(all_to_all_kernel, [(x, group) for x in xs])
    for j, o in enumerate(outs):
        want = np.concatenate([xs[k][8 * j : 8 * (j + 1)] for k in range(n)])
        np.testing.assert_array_equal(o, want)


@nki.jit
def permute_kernel(x, pairs):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    ncc.collective_permute(srcs=[src], dsts=[dst], source_target_pairs=pairs)
    nisa.dma_copy(dst=out, src=dst)
    return out


def test_collective_permute_pairwise_swap():
    xs = [_rand(8, 8, seed=r) for r in range(4)]
    pairs = ((0, 1), (1, 0), (2, 3), (3, 2))
    outs = ncc.run_ranks(permute_kernel, [(x, pairs) for x in xs])
    for r, o in enumerate(outs):
        np.testing.assert_array_equal(o, xs[r ^ 1])


@nki.jit
def ring_all_gather_kernel(x, group, n):
    """A ring all-gather: each step passes the chunk held to the successor,
    and the chunk lands at the rank it came from."""
    H, W = x.shape
    cols = _my_part(W)
    w = cols.stop - cols.start
    out = nl.ndarray((n, H, W), dtype=x.dtype, buffer=nl.shared_hbm)
    bufs = [nl.ndarray((H, W), dtype=x.dtype, buffer=nl.shared_hbm) for _ in range(2)]
    nisa.dma_copy(dst=bufs[0][:, cols], src=x[:, cols])
    for step in range(n):
        held = ncc.collective_permute_implicit_current_processing_rank_id(
            iteration_id=step, replica_group=group
        )
        tile = nl.ndarray((H, w), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=bufs[step % 2][:, cols])
        nisa.dma_copy(
            dst=out.ap(
                pattern=[[W, H], [1, w]], offset=cols.start, scalar_offset=held, indirect_dim=0
            ),
            src=tile,
        )
        if step + 1 < n:
            ncc.collective_permute_implicit(
                srcs_by_channel=[[bufs[step % 2][:, cols]]],
                dsts_by_channel=[[bufs[(step + 1) % 2][:, cols]]],
                replica_group=group,
            )
    return out


@pytest.mark.parametrize("lnc", [1, 2])
def test_implicit_ring_all_gather(lnc):
    n = 4
    xs = [_rand(16, 8, seed=r) for r in range(n)]
    group = ReplicaGroup([[0, 1, 2, 3]])
    outs = ncc.run_ranks(_launch(ring_all_gather_kernel, lnc), [(x, group, n) for x in xs])
    for o in outs:
        np.testing.assert_array_equal(o, np.stack(xs))


@nki.jit
def rank_slice_kernel(table):
    _, H, W = table.shape
    out = nl.ndarray((H, W), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(
        dst=out,
        src=table.ap(pattern=[[W, H], [1, W]], scalar_offset=ncc.rank_id(), indirect_dim=0),
    )
    return out


def test_rank_id_selects_each_ranks_slice():
    table = _rand(3, 4, 8)
    outs = ncc.run_ranks(rank_slice_kernel, lambda r: {"table": table}, num_ranks=3)
    for r, o in enumerate(outs):
        np.testing.assert_array_equal(o, table[r])
    # A launch of one rank is rank 0.
    np.testing.assert_array_equal(rank_slice_kernel(table), table[0])


def test_neuron_tensors_and_profile():
    import torch

    xs = [torch.from_numpy(_rand(128, 512, seed=r)).to("neuron") for r in range(2)]
    group = ReplicaGroup([[0, 1]])
    outs = ncc.run_ranks(all_reduce_kernel, [(x, group, nl.add) for x in xs])
    for o in outs:
        assert o.device.type == "neuron"
        torch.testing.assert_close(o.cpu(), (xs[0] + xs[1]).cpu())
    small = all_reduce_kernel.last_profile.total_us
    xs = [_rand(128, 4096, seed=r) for r in range(2)]
    ncc.run_ranks(all_reduce_kernel, [(x, group, nl.add) for x in xs])
    large = all_reduce_kernel.last_profile.total_us
    # The collective's fixed cost (4 us + 2 ring steps of 2 us) and its bytes.
    assert small > 8.0
    assert large > small


# Errors ---------------------------------------------------------------------------
def _line_of(kernel, text):
    import inspect

    lines, first = inspect.getsourcelines(kernel.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


@nki.jit
def skipping_kernel(x, group):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    if ncc.rank_id() == 0:
        ncc.all_reduce(srcs=[src], dsts=[dst], replica_group=group, op=nl.add)  # joins
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=src)
    return out


def test_a_rank_that_never_joins_is_an_error_not_a_hang():
    xs = [_rand(8, 8, seed=r) for r in range(2)]
    with pytest.raises(NKIError, match="deadlock") as e:
        ncc.run_ranks(skipping_kernel, [(x, ReplicaGroup([[0, 1]])) for x in xs])
    assert e.value.lineno == _line_of(skipping_kernel, "# joins")
    assert "rank 1 finished without reaching it" in str(e.value)


@nki.jit
def mismatched_kernel(x, group):
    n = 8 if ncc.rank_id() == 0 else 16
    src = nl.ndarray((n, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    dst = nl.ndarray((n, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src[0:8, :], src=x)
    ncc.all_reduce(srcs=[src], dsts=[dst], replica_group=group, op=nl.add)  # mismatch
    return x


def test_mismatched_shapes_between_ranks():
    xs = [_rand(8, 8, seed=r) for r in range(2)]
    with pytest.raises(NKIError, match="matching tensors") as e:
        ncc.run_ranks(mismatched_kernel, [(x, ReplicaGroup([[0, 1]])) for x in xs])
    assert e.value.lineno == _line_of(mismatched_kernel, "# mismatch")


def test_bad_replica_groups():
    xs = [_rand(8, 8, seed=r) for r in range(2)]
    with pytest.raises(NKIError, match="names rank 2, but the launch has 2 ranks"):
        ncc.run_ranks(all_reduce_kernel, [(x, ReplicaGroup([[0, 2]]), nl.add) for x in xs])
    with pytest.raises(NKIError, match="rank 1 is in no rank-list"):
        ncc.run_ranks(all_reduce_kernel, [(x, ReplicaGroup([[0]]), nl.add) for x in xs])
    with pytest.raises(ValueError, match="more than one rank-list"):
        ReplicaGroup([[0, 1], [1, 2]])
    # A launch of one rank cannot meet a second one.
    with pytest.raises(NKIError, match="run_ranks"):
        all_reduce_kernel(xs[0], ReplicaGroup([[0, 1]]), nl.add)


@nki.jit
def argument_collective_kernel(x, group):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ncc.all_reduce(srcs=[x], dsts=[out], replica_group=group, op=nl.add)
    return out


def test_collectives_do_not_touch_kernel_arguments_or_mismatched_shapes():
    xs = [_rand(8, 8, seed=r) for r in range(2)]
    with pytest.raises(NKIError, match="kernel argument or result"):
        ncc.run_ranks(argument_collective_kernel, [(x, ReplicaGroup([[0, 1]])) for x in xs])
    with pytest.raises(NKIError, match="make \\[16, 8\\] float32, the destination is \\[24, 8\\]"):
        ncc.run_ranks(hbm_all_gather_kernel, [(x, ReplicaGroup([[0, 1]]), 3) for x in xs])


def test_replica_group_from_partition_op():
    op = ncc.rg_partition_op
    assert ReplicaGroup.from_partition_op(8, op.div, 4) == ReplicaGroup(
        [[0, 1, 2, 3], [4, 5, 6, 7]]
    )
    assert ReplicaGroup.from_partition_op(4, op.mod, 2) == ReplicaGroup([[0, 2], [1, 3]])


@nki.jit
def barrier_then_gather_kernel(x, group, n):
    """At LNC=2: core 0 stages the rank's input in shared HBM, both cores meet
    at a barrier, then each gathers its half of the rows across the ranks."""
    H, W = x.shape
    core = nl.program_id(0)
    staged = nl.ndarray((H, W), dtype=x.dtype, buffer=nl.shared_hbm)
    if core == 0:
        nisa.dma_copy(dst=staged, src=x)
    nisa.core_barrier(staged, (0, 1))
    h = H // 2
    t = nl.ndarray((h, W), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=staged[core * h : (core + 1) * h, :])
    g = nl.ndarray((h, W * n), dtype=x.dtype, buffer=nl.sbuf)
    ncc.all_gather(srcs=[t], dsts=[g], replica_group=group, collective_dim=1)
    out = nl.ndarray((H, W * n), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[core * h : (core + 1) * h, :], src=g)
    return out


def test_core_barrier_inside_a_multi_rank_lnc2_launch():
    xs = [_rand(32, 8, seed=r) for r in range(2)]
    outs = ncc.run_ranks(
        barrier_then_gather_kernel[2], [(x, ReplicaGroup([[0, 1]]), 2) for x in xs]
    )
    for o in outs:
        np.testing.assert_array_equal(o, np.concatenate(xs, axis=1))


def test_a_torch_distributed_job_runs_the_kernel_as_its_ranks():
    """Two processes of a neuron process group, each one rank of the kernel
    (run_distributed); bounded by the launcher, nothing left behind."""
    from pathlib import Path

    from dist_jobs.launch import check_all_ok, run_ranks

    worker = str(Path(__file__).parent / "dist_jobs" / "nki_collectives_worker.py")
    for out in check_all_ok(run_ranks(worker, 2, timeout=240)):
        assert "DONE 4 checks, 0 failed" in out, out
