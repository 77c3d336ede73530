"""NKI's search instructions: ``nisa.max8``, ``nisa.nc_find_index8`` and
``nisa.nc_match_replace8`` (Vector engine) and ``nisa.nonzero_with_count``
(GpSimd), in the current destination-first form and (the first three) in the
original form that returns a tile (``neuronxcc.nki.isa``).

Each kernel is small, written here in the style of NKI's ISA reference pages,
and checked on neuron tensors against NumPy references of the semantics those
pages give (awsdocs-neuron.readthedocs-hosted.com, nki/api/generated/
nki.isa.<name>.html): the 8 largest values descending; the first position of
each value, equal values taking successive positions (ascending for
nc_find_index8, descending across the value slots for nc_match_replace8, the
pages' own example) and all ones when a value is absent; nonzero positions
plus an offset, padding and the count, on partitions 0, 16, ..., 112 only.
Broken rules are NKIErrors naming the kernel line."""

import os

import ml_dtypes
import neuronxcc.nki.isa as lisa
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch
from kernel_source import line_of

import torch_neuronx.nki as tnki
from torch_neuronx.nki import NKIError

HERE = os.path.basename(__file__)
RNG = np.random.default_rng(8)

TORCH = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "int32": torch.int32,
}
NUMPY = {
    "float32": np.float32,
    "bfloat16": ml_dtypes.bfloat16,
    "float16": np.float16,
    "int32": np.int32,
}


def neuron(a: np.ndarray, dtype: str | None = None) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(a).astype(np.float32))
    return t.to(TORCH[dtype or "float32"]).to("neuron")


def host(t: torch.Tensor) -> np.ndarray:
    assert t.device.type == "neuron"
    t = t.cpu()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


# NumPy references of the documented semantics --------------------------------------------
NOT_FOUND = {np.uint32: 0xFFFFFFFF, np.uint16: 0xFFFF}


def ref_max8(x):
    flat = x.reshape(x.shape[0], -1).astype(np.float32)
    return -np.sort(-flat, axis=1)[:, :8]


def ref_positions(x, vals, descending, not_found):
    """Position of each value, matched in the order 0..7 (7..0 when
    descending), each taking the first equal position no earlier one took."""
    flat = x.reshape(x.shape[0], -1).astype(np.float32)
    v = vals.reshape(vals.shape[0], -1).astype(np.float32)
    out = np.full(v.shape, not_found, np.int64)
    for p in range(flat.shape[0]):
        taken = np.zeros(flat.shape[1], bool)
        for i in range(7, -1, -1) if descending else range(8):
            hits = np.nonzero((flat[p] == v[p, i]) & ~taken)[0]
            if hits.size:
                out[p, i] = hits[0]
                taken[hits[0]] = True
    return out


def ref_match_replace8(x, vals, imm):
    pos = ref_positions(x, vals, True, 0xFFFFFFFF)
    out = x.reshape(x.shape[0], -1).astype(np.float32).copy()
    for p in range(out.shape[0]):
        for k in pos[p]:
            if k != 0xFFFFFFFF:
                out[p, k] = imm
    return out.reshape(x.shape), pos


def ref_nonzero_with_count(x, offset, padding, before):
    out = before.copy()
    flat = x.reshape(x.shape[0], -1)
    T = flat.shape[1]
    for p in range(0, flat.shape[0], 16):
        nz = np.nonzero(flat[p] != 0)[0]
        row = np.full(T + 1, padding, np.int64)
        row[: nz.size] = nz + offset
        row[T] = nz.size
        out[p] = row
    return out


# max8 + nc_find_index8: the top 8 of each row and where they are ---------------------------
@nki.jit
def top8(a):
    P, F = a.shape
    values = nl.ndarray((P, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    positions = nl.ndarray((P, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
    x = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    v = nl.ndarray((P, 8), dtype=a.dtype, buffer=nl.sbuf)
    i = nl.ndarray((P, 8), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.max8(dst=v, src=x)
    nisa.nc_find_index8(dst=i, data=x, vals=v)
    nisa.dma_copy(dst=values, src=v)
    nisa.dma_copy(dst=positions, src=i)
    return values, positions


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int32"])
def test_max8_and_find_index8_are_the_top8_and_their_positions(dtype):
    x = RNG.standard_normal((128, 200)).astype(np.float32)
    if dtype == "int32":
        x = RNG.permuted(np.tile(np.arange(200, dtype=np.float32) - 100, (128, 1)), axis=1)
    xt = neuron(x, dtype)
    v, i = top8(xt)
    xs = host(xt.to("neuron"))  # the values as the kernel's dtype holds them
    np.testing.assert_array_equal(host(v), ref_max8(xs))
    np.testing.assert_array_equal(
        host(i).astype(np.int64), ref_positions(xs, ref_max8(xs), False, 0)
    )
    assert v.dtype == TORCH[dtype] and i.dtype == torch.uint32


def test_equal_values_take_successive_positions_in_ascending_order():
    # Ties: the maximum 3.0 five times, 2.5 twice, then smaller values. max8
    # keeps duplicates; nc_find_index8 gives each copy its own position.
    x = RNG.uniform(-1, 1, (16, 64)).astype(np.float32)
    x[:, [40, 5, 23, 61, 9]] = 3.0
    x[:, [50, 2]] = 2.5
    v, i = top8(neuron(x))
    top = host(v)
    np.testing.assert_array_equal(top[:, :7], np.tile([3, 3, 3, 3, 3, 2.5, 2.5], (16, 1)))
    np.testing.assert_array_equal(host(i)[:, :7], np.tile([5, 9, 23, 40, 61, 2, 50], (16, 1)))
    np.testing.assert_array_equal(host(i).astype(np.int64), ref_positions(x, top, False, 0))


@nki.jit
def top8_of_3d(a):
    # A [P, 4, 32] source: the free dims are searched flattened, row-major.
    P = a.shape[0]
    values = nl.ndarray((P, 8), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    positions = nl.ndarray((P, 8), dtype=nl.uint16, buffer=nl.shared_hbm)
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    v = nl.ndarray((P, 8), dtype=nl.bfloat16, buffer=nl.sbuf)  # converted on output
    exact = nl.ndarray((P, 8), dtype=a.dtype, buffer=nl.sbuf)
    i = nl.ndarray((P, 8), dtype=nl.uint16, buffer=nl.sbuf)
    nisa.max8(dst=v, src=x)
    nisa.max8(dst=exact, src=x)
    nisa.nc_find_index8(dst=i, data=x, vals=exact)
    nisa.dma_copy(dst=values, src=v)
    nisa.dma_copy(dst=positions, src=i)
    return values, positions


def test_max8_reads_up_to_four_free_dims_and_converts_to_dst_dtype():
    x = RNG.standard_normal((32, 4, 32)).astype(np.float32)
    v, i = top8_of_3d(neuron(x))
    want = ref_max8(x)
    np.testing.assert_array_equal(host(v), want.astype(ml_dtypes.bfloat16).astype(np.float32))
    assert i.dtype == torch.uint16
    np.testing.assert_array_equal(host(i).astype(np.int64), ref_positions(x, want, False, 0))


# nc_find_index8 of given values: absent values, duplicates, uint16 / uint32 ------------------
@nki.jit
def find8(a, vals, index_dtype):
    P, F = a.shape
    out = nl.ndarray((P, 8), dtype=index_dtype, buffer=nl.shared_hbm)
    x = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    v = nl.ndarray((P, 8), dtype=vals.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=v, src=vals)
    i = nl.ndarray((P, 8), dtype=index_dtype, buffer=nl.sbuf)
    nisa.nc_find_index8(dst=i, data=x, vals=v)
    nisa.dma_copy(dst=out, src=i)
    return out


@pytest.mark.parametrize("index_dtype", [np.uint32, np.uint16])
def test_find_index8_duplicate_and_absent_values(index_dtype):
    # NKI's example data, and 8 values with a repeated one and absent ones.
    data = np.array([[1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8]], np.float32).repeat(4, 0)
    vals = np.array([[3, 8, 8, 8, 8, 8, 8, 8]], np.float32).repeat(4, 0)
    vals[1] = [8, 4, 8, 1, 8, 2, 8, 3]
    vals[2] = [5, 8, 8, 6, 1, 8, 8, 8]  # 5 and 6 are absent
    vals[3] = [8, 8, 8, 8, 8, 8, 8, 8]  # one more 8 than the data has
    got = host(find8(neuron(data), neuron(vals), index_dtype))
    ones = NOT_FOUND[index_dtype]
    assert got.dtype == index_dtype
    np.testing.assert_array_equal(got[0], [2, 4, 5, 6, 7, 8, 9, 10])
    np.testing.assert_array_equal(got[1], [4, 3, 5, 0, 6, 1, 7, 2])
    np.testing.assert_array_equal(got[2], [ones, 4, 5, ones, 0, 6, 7, 8])
    np.testing.assert_array_equal(got[3], [4, 5, 6, 7, 8, 9, 10, ones])
    np.testing.assert_array_equal(got.astype(np.int64), ref_positions(data, vals, False, ones))


@nki.jit
def argmax_broadcast(a):
    # One value per partition, read 8 times through a zero-stride access
    # pattern (as NKI-lib's cascaded max does): column 0 is the argmax.
    P, F = a.shape
    out = nl.ndarray((P, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
    x = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    m = nl.ndarray((P, 1), dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=m, op=nl.maximum, data=x, axis=1)
    i = nl.ndarray((P, 8), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.nc_find_index8(dst=i, data=x, vals=m.ap([[1, P], [0, 8]]))
    nisa.dma_copy(dst=out, src=i)
    return out


def test_find_index8_of_a_broadcast_maximum_is_the_argmax():
    x = RNG.standard_normal((64, 300)).astype(np.float32)
    got = host(argmax_broadcast(neuron(x)))
    np.testing.assert_array_equal(got[:, 0], x.argmax(axis=1))
    assert (got[:, 1:] == 0xFFFFFFFF).all()  # the maximum occurs once


# nc_match_replace8 ---------------------------------------------------------------------------
@nki.jit
def match_replace(a, vals, imm):
    P, F = a.shape
    replaced = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.shared_hbm)
    positions = nl.ndarray((P, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
    x = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    v = nl.ndarray((P, 8), dtype=vals.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=v, src=vals)
    out = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    i = nl.ndarray((P, 8), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.nc_match_replace8(dst=out, data=x, vals=v, imm=imm, dst_idx=i)
    nisa.dma_copy(dst=replaced, src=out)
    nisa.dma_copy(dst=positions, src=i)
    return replaced, positions


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int32"])
def test_match_replace8_follows_the_documented_example(dtype):
    data = np.array([[1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8]], np.float32).repeat(3, 0)
    vals = np.array([[3, 8, 8, 8, 8, 8, 8, 8]], np.float32).repeat(3, 0)
    vals[1] = [8, 4, 8, 1, 8, 2, 8, 3]
    vals[2] = [1, 2, 3, 4, 8, 8, 8, 8]
    out, idx = match_replace(neuron(data, dtype), neuron(vals, dtype), -7.0)
    np.testing.assert_array_equal(host(idx)[0], [2, 10, 9, 8, 7, 6, 5, 4])  # NKI's example
    want, pos = ref_match_replace8(data, vals, -7.0)
    np.testing.assert_array_equal(host(out), want)
    np.testing.assert_array_equal(host(idx).astype(np.int64), pos)
    np.testing.assert_array_equal(host(out)[0], [1, 2, -7, 4, -7, -7, -7, -7, -7, -7, -7])
    np.testing.assert_array_equal(host(out)[2], [-7, -7, -7, -7, -7, -7, -7, -7, 8, 8, 8])


@nki.jit
def topk_by_replacement(a, k):
    # Top-k, 8 at a time: max8, then nc_match_replace8 knocks those 8 out of
    # the data in place (dst is the data) and records where they were.
    P, F = a.shape
    values = nl.ndarray((P, k), dtype=a.dtype, buffer=nl.shared_hbm)
    positions = nl.ndarray((P, k), dtype=nl.uint32, buffer=nl.shared_hbm)
    x = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    v = nl.ndarray((P, k), dtype=a.dtype, buffer=nl.sbuf)
    i = nl.ndarray((P, k), dtype=nl.uint32, buffer=nl.sbuf)
    for r in nl.sequential_range(k // 8):
        cols = nl.ds(r * 8, 8)
        nisa.max8(dst=v[:, cols], src=x)
        nisa.nc_match_replace8(
            dst=x, data=x, vals=v[:, cols], imm=float("-inf"), dst_idx=i[:, cols]
        )
    nisa.dma_copy(dst=values, src=v)
    nisa.dma_copy(dst=positions, src=i)
    return values, positions


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_topk_by_max8_and_match_replace8_is_torch_topk(dtype):
    x = torch.randn(128, 1000).to(TORCH[dtype])
    if dtype == "bfloat16":  # 1000 distinct bfloat16 values (bit patterns), shuffled
        bits = np.concatenate([0xBF80 + np.arange(500), 0x3F80 + np.arange(500)]).astype(np.uint16)
        rows = RNG.permuted(np.tile(bits, (128, 1)), axis=1)
        x = torch.from_numpy(rows.view(ml_dtypes.bfloat16).astype(np.float32)).to(torch.bfloat16)
    v, i = topk_by_replacement(x.to("neuron"), 24)
    ref = torch.topk(x.float(), 24, dim=1)
    np.testing.assert_array_equal(host(v), ref.values.numpy())
    np.testing.assert_array_equal(host(i).astype(np.int64), ref.indices.numpy())


# nonzero_with_count ---------------------------------------------------------------------------
@nki.jit
def nonzeros(a, index_offset, padding_val):
    P, T = a.shape
    out = nl.ndarray((P, T + 1), dtype=nl.int32, buffer=nl.shared_hbm)
    x = nl.ndarray((P, T), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    o = nl.ndarray((P, T + 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=o, value=99)  # partitions the GpSimd cores do not write keep it
    nisa.nonzero_with_count(dst=o, src=x, index_offset=index_offset, padding_val=padding_val)
    nisa.dma_copy(dst=out, src=o)
    return out


@nki.jit
def nonzeros_copied(a):
    # The result tile copied whole afterwards: the copy keeps what the GpSimd
    # cores did not write (it is not folded into nonzero_with_count).
    P, T = a.shape
    out = nl.ndarray((P, T + 1), dtype=nl.int32, buffer=nl.shared_hbm)
    x = nl.ndarray((P, T), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    o = nl.ndarray((P, T + 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=o, value=99)
    nisa.nonzero_with_count(dst=o, src=x, index_offset=0, padding_val=-1)
    copy = nl.ndarray((P, T + 1), dtype=nl.int32, buffer=nl.sbuf)
    copy[...] = o
    nisa.dma_copy(dst=out, src=copy)
    return out


def test_a_copy_of_the_result_keeps_the_unwritten_partitions():
    x = (RNG.random((32, 20)) < 0.5).astype(np.float32)
    got = host(nonzeros_copied(neuron(x)))
    want = ref_nonzero_with_count(x, 0, -1, np.full((32, 21), 99, np.int64))
    np.testing.assert_array_equal(got.astype(np.int64), want)


def test_nonzero_with_count_documented_example():
    x = np.array([[0, 1, 1, 0, 0, 1, 0, 0]], np.float32).repeat(17, 0)
    got = host(nonzeros(neuron(x), 16, -1))
    np.testing.assert_array_equal(got[0], [17, 18, 21, -1, -1, -1, -1, -1, 3])
    np.testing.assert_array_equal(got[16], got[0])
    assert (got[1:16] == 99).all()


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("P", [128, 40])
def test_nonzero_with_count_on_each_gpsimd_core(dtype, P):
    x = RNG.standard_normal((P, 300)).astype(np.float32) * (RNG.random((P, 300)) < 0.2)
    x = np.round(x * 4)
    x[16] = 0  # no nonzero at all: all padding, count 0
    x[32] = 1  # all nonzero
    got = host(nonzeros(neuron(x, dtype), 70000, -5))
    want = ref_nonzero_with_count(x, 70000, -5, np.full((P, 301), 99, np.int64))
    np.testing.assert_array_equal(got.astype(np.int64), want)
    assert got[16, -1] == 0 and got[32, -1] == 300


@nki.jit
def nonzeros_rows(a, all_rows):
    # Only partition 0 of the source is ever written, as in NKI-lib's
    # single-column kernel; the result's other partitions are read back only
    # when all_rows is set.
    T = a.shape[1]
    out = nl.ndarray((128 if all_rows else 1, T + 1), dtype=nl.int32, buffer=nl.shared_hbm)
    x = nl.ndarray((128, T), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x[0:1, :], src=a)
    o = nl.ndarray((128, T + 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.nonzero_with_count(dst=o, src=x, index_offset=0, padding_val=-1)
    nisa.dma_copy(dst=out, src=o[0 : out.shape[0], :])
    return out


def test_nonzero_with_count_writes_only_the_first_partition_of_each_core():
    x = (RNG.random((1, 64)) < 0.5).astype(np.float32)
    got = host(nonzeros_rows(neuron(x), False))
    np.testing.assert_array_equal(
        got, ref_nonzero_with_count(x, 0, -1, np.zeros((1, 65), np.int64))
    )
    # Partition 1 is never written: reading it back is an uninitialised read.
    with pytest.raises(NKIError, match="never written"):
        nonzeros_rows(neuron(x), True)


# The original form (neuronxcc.nki.isa): each instruction returns a new tile -----------------
@nki.jit
def legacy_search(a):
    P, F = a.shape
    top = nl.ndarray((P, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    where = nl.ndarray((P, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
    rest = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    v = lisa.max8(src=x)
    i = lisa.nc_find_index8(data=x, vals=v)
    r = lisa.nc_match_replace8(data=x, vals=v, imm=0.0)
    nl.store(top, value=v)
    nl.store(where, value=i)
    nl.store(rest, value=r)
    return top, where, rest


def test_the_original_form_returns_tiles():
    x = RNG.standard_normal((64, 96)).astype(np.float32)
    v, i, r = legacy_search(neuron(x))
    want = ref_max8(x)
    np.testing.assert_array_equal(host(v), want)
    assert i.dtype == torch.uint32
    np.testing.assert_array_equal(host(i).astype(np.int64), ref_positions(x, want, False, 0))
    np.testing.assert_array_equal(host(r), ref_match_replace8(x, want, 0.0)[0])


# Cost: N Vector cycles (NKI's published estimate) and the GpSimd rule ---------------------------
@nki.jit
def one_max8(a):
    out = nl.ndarray((a.shape[0], 8), dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    v = nl.ndarray((a.shape[0], 8), dtype=a.dtype, buffer=nl.sbuf)
    nisa.max8(dst=v, src=x)
    nisa.dma_copy(dst=out, src=v)
    return out


def test_cost_is_n_vector_cycles_and_gpsimd_150_plus_n():
    hw = tnki.hardware_targets()["trn2"]
    x = np.zeros((128, 4096), np.float32)
    p = tnki.estimate(one_max8, x)
    assert p.instructions["vector"] == 1
    assert p.busy_us["vector"] == pytest.approx(4096 / hw["vector_ghz"] / 1e3)
    small = tnki.estimate(one_max8, np.zeros((128, 16), np.float32))  # the 64-cycle floor
    assert small.busy_us["vector"] == pytest.approx(64 / hw["vector_ghz"] / 1e3)
    q = tnki.estimate(nonzeros, np.zeros((128, 1000), np.float32), 0, -1)
    assert q.instructions["gpsimd"] == 1
    assert q.busy_us["gpsimd"] == pytest.approx((150 + 1000) / hw["gpsimd_ghz"] / 1e3)


# Broken rules: NKIErrors at the kernel line ----------------------------------------------------


@nki.jit
def bad_search(a, case):
    P, F = a.shape
    out = nl.ndarray((P, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    v = nl.ndarray((P, 8), dtype=nl.float32, buffer=nl.sbuf)
    if case == "max8-few":
        nisa.max8(dst=v, src=x[:, 0:7])  # max8-few
    elif case == "max8-many":
        big = nl.ndarray((P, 16385), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.max8(dst=v, src=big)  # max8-many
    elif case == "max8-dst":
        nisa.max8(dst=v[:, 0:4], src=x)  # max8-dst
    elif case == "max8-partitions":
        nisa.max8(dst=v[0:64, :], src=x)  # max8-partitions
    elif case == "max8-hbm":
        nisa.max8(dst=v, src=a)  # max8-hbm
    elif case == "find-dtype":
        nisa.nc_find_index8(dst=v, data=x, vals=v)  # find-dtype
    elif case == "find-vals":
        i = nl.ndarray((P, 8), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.nc_find_index8(dst=i, data=x, vals=v[:, 0:4])  # find-vals
    elif case == "replace-idx-dtype":
        j = nl.ndarray((P, 8), dtype=nl.int32, buffer=nl.sbuf)
        nisa.nc_match_replace8(dst=x, data=x, vals=v, imm=0.0, dst_idx=j)  # replace-idx-dtype
    elif case == "replace-dst":
        nisa.nc_match_replace8(dst=x[:, 0:8], data=x, vals=v, imm=0.0)  # replace-dst
    elif case == "replace-imm":
        nisa.nc_match_replace8(dst=x, data=x, vals=v, imm=v)  # replace-imm
    elif case == "legacy-dtype":
        lisa.nc_find_index8(data=x, vals=v, dtype=nl.float32)  # legacy-dtype
    nisa.dma_copy(dst=out, src=v)
    return out


@nki.jit
def bad_nonzero(a, case):
    P, T = a.shape
    x = nl.ndarray((P, T), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    o = nl.ndarray((P, T + 1), dtype=nl.int32, buffer=nl.sbuf)
    if case == "src-dtype":
        y = nl.ndarray((P, T), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.nonzero_with_count(dst=o, src=y)  # src-dtype
    elif case == "dst-dtype":
        f = nl.ndarray((P, T + 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nonzero_with_count(dst=f, src=x)  # dst-dtype
    elif case == "dst-psum":
        q = nl.ndarray((P, T + 1), dtype=nl.int32, buffer=nl.psum)
        nisa.nonzero_with_count(dst=q, src=x)  # dst-psum
    elif case == "dst-size":
        nisa.nonzero_with_count(dst=o[:, 0:T], src=x)  # dst-size
    elif case == "offset":
        nisa.nonzero_with_count(dst=o, src=x, index_offset=1.5)  # offset
    elif case == "partitions":
        nisa.nonzero_with_count(dst=o[0:32, :], src=x)  # partitions
    return o


@pytest.mark.parametrize(
    ("kernel", "case", "limit", "phrases"),
    [
        (bad_search, "max8-few", "search-limit", ["max8: src", "7 elements", "8 and 16,384"]),
        (bad_search, "max8-many", "search-limit", ["16385 elements", "8 and 16,384"]),
        (bad_search, "max8-dst", "shape", ["max8: dst", "exactly 8"]),
        (bad_search, "max8-partitions", "shape", ["differ in partitions", "src 128", "dst 64"]),
        (bad_search, "max8-hbm", "buffer", ["SBUF or PSUM", "HBM"]),
        (bad_search, "find-dtype", "dtype", ["nc_find_index8: dst is float32", "uint16 or uint32"]),
        (bad_search, "find-vals", "shape", ["vals [128, 4]", "exactly 8"]),
        (bad_search, "replace-idx-dtype", "dtype", ["dst_idx is int32", "uint16 or uint32"]),
        (bad_search, "replace-dst", "shape", ["dst [128, 8] has 8 elements", "the data's shape"]),
        (bad_search, "replace-imm", "operand", ["imm must be a float constant"]),
        (bad_search, "legacy-dtype", "dtype", ["dtype is float32", "uint16 or uint32"]),
        (bad_nonzero, "src-dtype", "dtype", ["src is bfloat16", "float32 or int32"]),
        (bad_nonzero, "dst-dtype", "dtype", ["dst is float32", "int32"]),
        (bad_nonzero, "dst-psum", "buffer", ["dst is in PSUM", "SBUF only"]),
        (bad_nonzero, "dst-size", "shape", ["has 64 elements", "one more than src"]),
        (bad_nonzero, "offset", "operand", ["index_offset must be an int32 constant"]),
        (bad_nonzero, "partitions", "shape", ["differ in partitions"]),
    ],
)
def test_broken_rules_name_the_kernel_line(kernel, case, limit, phrases):
    a = np.zeros((128, 64), np.float32)
    with pytest.raises(NKIError) as info:
        kernel(a, case)
    e = info.value
    assert e.limit == limit, str(e)
    assert os.path.basename(e.filename) == HERE, str(e)
    assert e.lineno == line_of(kernel.fn, f"# {case}"), str(e)
    for p in phrases:
        assert p in str(e), str(e)
