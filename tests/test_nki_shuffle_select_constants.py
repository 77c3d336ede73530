"""Cross-partition shuffles, gathers, predicated selections and constant
tensors: ``nisa.nc_stream_shuffle``, ``nisa.local_gather``,
``nisa.range_select``, ``nisa.select_reduce``, ``nisa.tensor_copy_predicated``,
``nisa.tensor_scalar_reduce``, ``nl.shared_identity_matrix`` and
``nl.shared_constant``.

Each kernel is small, written here in the style of NKI's documentation, and
checked against NumPy on NumPy arrays and on CPU and neuron tensors; each
documented rule a kernel breaks is an NKIError naming the kernel's line."""

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

from torch_neuronx.nki import NKIError

RNG = np.random.default_rng(7)
DEVICES = ["cpu", "neuron"]
HERE = os.path.basename(__file__)
FP32_MIN = float(np.finfo(np.float32).min)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def on(device, *arrays):
    return [torch.from_numpy(a).to(device) for a in arrays]


def run(kernel, device, *arrays):
    """The kernel on NumPy arrays (nki.simulate) or on tensors of a device;
    NumPy results either way."""
    if device == "numpy":
        out = nki.simulate(kernel)(*arrays)
    else:
        out = kernel(*on(device, *arrays))
    if isinstance(out, tuple):
        return tuple(_np(o) for o in out)
    return _np(out)


def _np(x):
    if isinstance(x, torch.Tensor):
        x = x.cpu()
        return x.float().numpy() if x.dtype == torch.bfloat16 else x.numpy()
    return x


def expect_error(kernel, args, call, *phrases, case=None, limit=None):
    with pytest.raises(NKIError) as info:
        nki.simulate(kernel)(*args)
    e = info.value
    assert e.lineno == line_of(
        kernel.fn, call, after=None if case is None else f'case == "{case}"'
    ), str(e)
    assert os.path.basename(e.filename) == HERE, str(e)
    if limit is not None:
        assert e.limit == limit, str(e)
    for p in phrases:
        assert p in str(e), str(e)
    return e


def shuffled(src, dst, mask):
    """NumPy reference of nc_stream_shuffle: dst partition q*32+i copies src
    partition q*32+mask[i]; 255 leaves it."""
    out = dst.copy()
    for k in range(dst.shape[0]):
        q, i = divmod(k, 32)
        if mask[i] != 255:
            out[k] = src[q * 32 + mask[i]]
    return out


# nc_stream_shuffle ------------------------------------------------------------------
@nki.jit
def broadcast_row_kernel(a):
    """Partition 0 onto every partition, one quadrant per shuffle (NKI-lib's
    bias broadcast)."""
    out = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[0:1, :], src=a[0:1, :])
    for q in nl.affine_range(4):
        nisa.nc_stream_shuffle(
            dst=t[q * 32 : (q + 1) * 32, :], src=t[0:1, :], shuffle_mask=[0] * 32
        )
    nl.store(out, value=t)
    return out


@pytest.mark.parametrize("device", ["numpy", *DEVICES])
def test_shuffle_broadcasts_a_partition(device):
    a = rand(1, 96)
    np.testing.assert_array_equal(run(broadcast_row_kernel, device, a), np.repeat(a, 128, 0))


def test_a_broadcast_shuffle_is_one_vector_pass():
    nki.simulate(broadcast_row_kernel)(rand(1, 512))
    profile = broadcast_row_kernel.last_profile
    # One copy per quadrant shuffle, each charged as one Vector pass over
    # the 512 elements of a partition.
    assert profile.instructions["vector"] == 4
    one_pass = 512 / 0.96e3  # us at the Vector engine's 0.96 GHz
    assert profile.busy_us["vector"] == pytest.approx(4 * one_pass, rel=0.05)


def shuffle_kernel(mask, in_place=False, rows=128):
    @nki.jit
    def kernel(a, b):
        out = nl.ndarray((rows, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
        src = nl.load(a)
        if in_place:
            nisa.nc_stream_shuffle(dst=src, src=src, shuffle_mask=mask)
            nl.store(out, value=src)
        else:
            dst = nl.load(b[0:rows, :])
            nisa.nc_stream_shuffle(dst=dst, src=src, shuffle_mask=mask)
            nl.store(out, value=dst)
        return out

    return kernel


MASKS = {
    "reverse": list(range(31, -1, -1)),
    "permutation": [int(i) for i in RNG.permutation(32)],
    "rotate": [(i + 5) % 32 for i in range(32)],
    "with_skips": [3, 4, 5, 255, 255, 9, 9, 9, 1, 0, *range(22)],
    "one_entry": [16] + [255] * 31,
}


@pytest.mark.parametrize("name", sorted(MASKS))
@pytest.mark.parametrize("device", ["numpy", *DEVICES])
def test_shuffle_moves_partitions_within_each_quadrant(name, device):
    mask = MASKS[name]
    a, b = rand(128, 24), rand(128, 24)
    got = run(shuffle_kernel(mask), device, a, b)
    np.testing.assert_array_equal(got, shuffled(a, b, mask))


@pytest.mark.parametrize("name", sorted(MASKS))
def test_shuffle_in_place_reads_every_source_before_writing(name):
    mask = MASKS[name]
    a = rand(128, 24)
    got = run(shuffle_kernel(mask, in_place=True), "numpy", a, a)
    np.testing.assert_array_equal(got, shuffled(a, a, mask))


def test_shuffle_of_a_partial_quadrant_and_fewer_partitions():
    # dst: 40 partitions (a whole quadrant and 8 of the next).
    mask = MASKS["reverse"][:8] + list(range(24))
    a, b = rand(64, 8), rand(64, 8)
    got = run(shuffle_kernel(mask, rows=40), "numpy", a, b)
    np.testing.assert_array_equal(got, shuffled(a, b[:40], mask))


@nki.jit
def shuffle_block_tiles_kernel(a):
    """dst [P, 4, 8] from src [P, 32]: the same elements per partition."""
    out = nl.ndarray((32, 4, 8), dtype=a.dtype, buffer=nl.shared_hbm)
    src = nl.load(a)
    dst = nl.ndarray((32, 4, 8), dtype=a.dtype, buffer=nl.sbuf)
    nisa.nc_stream_shuffle(dst=dst, src=src, shuffle_mask=list(range(31, -1, -1)))
    nl.store(out, value=dst)
    return out


def test_shuffle_between_tiles_of_different_free_shapes():
    a = rand(32, 32)
    got = run(shuffle_block_tiles_kernel, "numpy", a)
    np.testing.assert_array_equal(got, a[::-1].reshape(32, 4, 8))


@nki.jit
def legacy_shuffle_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    src, dst = nl.load(a), nl.load(b)
    lisa.nc_stream_shuffle(src, dst, [(i + 1) % 32 for i in range(32)])
    nl.store(out, value=dst)
    return out


def test_legacy_shuffle_takes_src_first():
    a, b = rand(64, 16), rand(64, 16)
    mask = [(i + 1) % 32 for i in range(32)]
    np.testing.assert_array_equal(run(legacy_shuffle_kernel, "numpy", a, b), shuffled(a, b, mask))


def bad_shuffle(case):
    @nki.jit
    def kernel(a):
        t = nl.load(a)
        d = nl.ndarray((64, 16), dtype=nl.float32, buffer=nl.sbuf)
        if case == "mask_length":
            nisa.nc_stream_shuffle(dst=d, src=t, shuffle_mask=[0] * 16)
        elif case == "mask_entry":
            nisa.nc_stream_shuffle(dst=d, src=t, shuffle_mask=[40] * 32)
        elif case == "dtype":
            h = nl.ndarray((64, 16), dtype=nl.bfloat16, buffer=nl.sbuf)
            nisa.nc_stream_shuffle(dst=h, src=t, shuffle_mask=[0] * 32)
        elif case == "elements":
            w = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.nc_stream_shuffle(dst=w, src=t, shuffle_mask=[0] * 32)
        elif case == "start":
            nisa.nc_stream_shuffle(dst=d[16:48, :], src=t[0:32, :], shuffle_mask=[0] * 32)
        elif case == "start64":
            nisa.nc_stream_shuffle(dst=d[32:64, :], src=t[0:64, :], shuffle_mask=[0] * 32)
        elif case == "src_partitions":
            nisa.nc_stream_shuffle(dst=d, src=t[0:1, :], shuffle_mask=[0] * 32)
        elif case == "hbm":
            nisa.nc_stream_shuffle(dst=d, src=a, shuffle_mask=[0] * 32)
        return a

    return kernel


@pytest.mark.parametrize(
    "case, phrases",
    [
        ("mask_length", ["shuffle_mask has 16 entries"]),
        ("mask_entry", ["shuffle_mask[0] = 40", "255"]),
        ("dtype", ["same data type"]),
        ("elements", ["same number"]),
        ("start", ["dst starts at partition 16", "0/32/64/96"]),
        ("start64", ["dst starts at partition 32", "64 active", "0/64"]),
        ("src_partitions", ["reads partition 32 of src", "which has 1 partitions"]),
        ("hbm", ["src is in HBM"]),
    ],
)
def test_shuffle_rules_are_errors_at_the_kernel_line(case, phrases):
    expect_error(bad_shuffle(case), [rand(64, 16)], "nisa.nc_stream_shuffle(", *phrases, case=case)


# local_gather ---------------------------------------------------------------------
def gathered(src, index, per_index, valid):
    """NumPy reference of local_gather: each group of 16 partitions reads its
    16 partitions of index partition-first; every partition of the group
    takes ``per_index`` elements of its own (flattened) row at each index."""
    rows = src.reshape(src.shape[0], -1)
    out = np.empty((src.shape[0], valid, per_index), src.dtype)
    for g in range(0, src.shape[0], 16):
        offsets = index[g : g + 16].T.reshape(-1)[:valid].astype(np.int64)
        for e in range(per_index):
            out[g : g + 16, :, e] = rows[g : g + 16][:, offsets + e]
    return out


def local_gather_kernel(per_index, valid, legacy=False):
    @nki.jit
    def kernel(src, index):
        out = nl.ndarray((src.shape[0], valid, per_index), dtype=src.dtype, buffer=nl.shared_hbm)
        data, idx = nl.load(src), nl.load(index)
        if legacy:
            got = lisa.local_gather(data, idx, per_index, valid)
        else:
            got = nl.ndarray((src.shape[0], valid * per_index), dtype=src.dtype, buffer=nl.sbuf)
            nisa.local_gather(
                dst=got,
                src_buffer=data,
                index=idx,
                num_elem_per_idx=per_index,
                num_valid_indices=valid,
            )
        nl.store(out, value=got)
        return out

    return kernel


@pytest.mark.parametrize(
    "per_index, valid, legacy", [(1, 64, False), (4, 50, False), (2, 64, True)]
)
@pytest.mark.parametrize("device", ["numpy", *DEVICES])
def test_local_gather_takes_columns_by_index_per_group_of_16(per_index, valid, legacy, device):
    src = rand(128, 32, 4)
    index = (RNG.integers(0, 31, (128, 4)) * per_index).astype(np.uint16)
    got = run(local_gather_kernel(per_index, valid, legacy), device, src, index)
    np.testing.assert_array_equal(got, gathered(src, index, per_index, valid))


def test_local_gather_index_past_the_row_is_an_error_when_it_runs():
    index = np.full((32, 1), 500, dtype=np.uint16)
    with pytest.raises(NKIError, match="outside the 128 columns"):
        nki.simulate(local_gather_kernel(1, 16))(rand(32, 128), index)


def bad_local_gather(case):
    @nki.jit
    def kernel(x, i):
        t, idx = nl.load(x), nl.load(i)
        d = nl.ndarray((x.shape[0], 16), dtype=nl.float32, buffer=nl.sbuf)
        if case == "float_index":
            nisa.local_gather(dst=d, src_buffer=t, index=t[:, 0:1])
        elif case == "partitions":
            nisa.local_gather(dst=d[0:8, :], src_buffer=t[0:8, :], index=idx[0:8, :])
        elif case == "dst_size":
            nisa.local_gather(dst=d, src_buffer=t, index=idx, num_valid_indices=8)
        elif case == "valid":
            nisa.local_gather(dst=d, src_buffer=t, index=idx, num_valid_indices=17)
        elif case == "psum":
            ps = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.psum)
            nisa.local_gather(dst=d, src_buffer=ps, index=idx)
        return x

    return kernel


@pytest.mark.parametrize(
    "case, phrases",
    [
        ("float_index", ["index is float32"]),
        ("partitions", ["8 partitions are not whole GpSimd cores of 16"]),
        ("dst_size", ["8 x 1 elements per partition"]),
        ("valid", ["num_valid_indices 17 exceeds the 16 indices"]),
        ("psum", ["src_buffer must be an SBUF tile"]),
    ],
)
def test_local_gather_rules_are_errors_at_the_kernel_line(case, phrases):
    args = [rand(32, 20), RNG.integers(0, 20, (32, 1)).astype(np.uint16)]
    expect_error(bad_local_gather(case), args, "nisa.local_gather(", *phrases, case=case)


# nl.shared_identity_matrix ----------------------------------------------------------
@nki.jit
def transpose_by_identity_kernel(a):
    """a.T through the Tensor engine against the shared identity."""
    out = nl.ndarray((a.shape[1], a.shape[0]), dtype=nl.float32, buffer=nl.shared_hbm)
    ident = nl.shared_identity_matrix(n=a.shape[0], dtype=nl.float32)
    again = nl.shared_identity_matrix(a.shape[0], dtype=nl.float32)
    assert again is ident  # one identity per size and dtype in a kernel
    ps = nl.ndarray((a.shape[1], a.shape[0]), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=nl.load(a), moving=again)
    nl.store(out, value=ps)
    return out


@pytest.mark.parametrize("device", ["numpy", *DEVICES])
def test_shared_identity_matrix_transposes_through_a_matmul(device):
    a = rand(64, 48)
    np.testing.assert_array_equal(run(transpose_by_identity_kernel, device, a), a.T)


def identity_kernel(n, dtype=None, into=False):
    @nki.jit
    def kernel(a):
        out = nl.ndarray((n, n), dtype=nl.float32, buffer=nl.shared_hbm)
        if into:
            t = nl.ndarray((n, n), dtype=nl.bfloat16, buffer=nl.sbuf)
            nl.shared_identity_matrix(n, dtype=nl.bfloat16, dst=t)
        elif dtype is None:
            t = nl.shared_identity_matrix(n)
        else:
            t = nl.shared_identity_matrix(n, dtype=dtype)
        nl.store(out, value=nl.copy(t, dtype=nl.float32))
        return out

    return kernel


@pytest.mark.parametrize("case", ["uint8 default", "bfloat16", "dst"])
def test_shared_identity_matrix_values(case):
    kernel = identity_kernel(
        128, dtype=nl.bfloat16 if case == "bfloat16" else None, into=case == "dst"
    )
    got = run(kernel, "numpy", rand(1, 1))
    np.testing.assert_array_equal(got, np.eye(128, dtype=np.float32))
    assert kernel.last_profile.instructions["vector"] == 3  # two memsets and the copy


@nki.jit
def too_big_identity_kernel(a):
    nl.shared_identity_matrix(256, dtype=nl.float32)
    return a


def test_shared_identity_matrix_larger_than_the_partitions_is_an_error():
    expect_error(
        too_big_identity_kernel,
        [rand(1, 1)],
        "shared_identity_matrix(",
        "256",
        limit="partition-dim",
    )


# nl.shared_constant ---------------------------------------------------------------
def constant_kernel(data, dtype=None, twice=False):
    @nki.jit
    def kernel(a):
        if dtype is None:
            c = nl.shared_constant(data)
        else:
            c = nl.shared_constant(data, dtype=dtype)
        if twice:
            assert nl.shared_constant(data, dtype=dtype) is c
        out = nl.ndarray(c.shape, dtype=c.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=c)
        return out

    return kernel


CONSTANTS = {
    "anti-diagonal": np.eye(64, dtype=np.float32)[::-1].copy(),
    "arange": np.arange(600, dtype=np.int32).reshape(6, 100),
    "ramps": np.arange(16, dtype=np.float32)[None, :] * 2
    + np.arange(128, dtype=np.float32)[:, None],
    "few values": RNG.integers(0, 3, (8, 40)).astype(np.float32),
    "bfloat16": RNG.standard_normal((4, 9)).astype(ml_dtypes.bfloat16),
    "vector": np.linspace(-1, 1, 33, dtype=np.float32),
}


@pytest.mark.parametrize("name", sorted(CONSTANTS))
@pytest.mark.parametrize("device", ["numpy", *DEVICES])
def test_shared_constant_holds_its_data(name, device):
    data = CONSTANTS[name]
    if device != "numpy" and data.dtype == ml_dtypes.bfloat16:
        pytest.skip("bfloat16 arrays have no torch.from_numpy")
    got = run(constant_kernel(data), device, rand(1, 1))
    np.testing.assert_array_equal(
        got, data.astype(np.float32) if device != "numpy" and name == "bfloat16" else data
    )


def test_shared_constant_from_a_npy_file_converted_and_shared(tmp_path):
    path = tmp_path / "table.npy"
    np.save(path, np.arange(24, dtype=np.float64).reshape(4, 6))
    kernel = constant_kernel(str(path), dtype=nl.float32, twice=True)
    got = run(kernel, "numpy", rand(1, 1))
    np.testing.assert_array_equal(got, np.arange(24, dtype=np.float32).reshape(4, 6))
    assert got.dtype == np.float32
    assert kernel.last_profile.instructions["dma"] == 2  # the constant's block, the copy


def test_an_identity_constant_is_two_memsets():
    kernel = constant_kernel(np.eye(128, dtype=np.float32))
    run(kernel, "numpy", rand(1, 1))
    assert kernel.last_profile.instructions["vector"] == 2


def bad_constant(data, dtype=None):
    @nki.jit
    def kernel(a):
        nl.shared_constant(data, dtype=dtype)
        return a

    return kernel


@pytest.mark.parametrize(
    "data, dtype, phrases",
    [
        (np.zeros((2, 2)), None, ["no element type float64", "dtype="]),
        (np.array([[1 << 25]], dtype=np.int32), None, ["beyond 2**24", "not supported yet"]),
        (RNG.standard_normal((128, 128)).astype(np.float32), None, ["no compact structure"]),
        ("/nonexistent/c.npy", None, ["cannot read"]),
    ],
)
def test_shared_constant_errors(data, dtype, phrases):
    expect_error(bad_constant(data, dtype), [rand(1, 1)], "nl.shared_constant(", *phrases)


# range_select ---------------------------------------------------------------------
def range_select_kernel(dst_dtype=nl.float32, start=0, ops=(nl.greater_equal, nl.less)):
    @nki.jit
    def kernel(x, lo, hi):
        out = nl.ndarray(x.shape, dtype=dst_dtype, buffer=nl.shared_hbm)
        row_max = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        scores = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_copy(dst=scores, src=nl.load(x))
        masked = nl.ndarray(x.shape, dtype=dst_dtype, buffer=nl.sbuf)
        best = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.range_select(
            dst=masked,
            on_true_tile=scores,
            comp_op0=ops[0],
            comp_op1=ops[1],
            bound0=nl.load(lo),
            bound1=nl.load(hi),
            reduce_cmd=nisa.reduce_cmd.reset_reduce,
            reduce_res=best,
            reduce_op=nl.maximum,
            range_start=start,
            on_false_value=FP32_MIN,
        )
        nl.store(out, value=masked)
        nl.store(row_max, value=best)
        return out, row_max

    return kernel


def bounds(p, f):
    lo = RNG.integers(0, f, (p, 1)).astype(np.float32)
    hi = (lo + RNG.integers(0, f // 2, (p, 1))).astype(np.float32)
    hi[0] = lo[0]  # an empty window: a row of fill values
    return lo, hi


@pytest.mark.parametrize("device", ["numpy", *DEVICES])
def test_range_select_keeps_a_window_of_each_row(device):
    x = rand(128, 96)
    lo, hi = bounds(128, 96 + 40)
    out, best = run(range_select_kernel(start=40), device, x, lo, hi)
    j = np.arange(96)[None, :] + 40
    want = np.where((j >= lo) & (j < hi), x, FP32_MIN)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(best, want.max(axis=1, keepdims=True))


def test_range_select_into_bfloat16_keeps_the_fp32_reduction():
    # NKI's page: a bf16 dst holds -inf where the fill value was written; an
    # fp32 reduce_res holds FP32_MIN for a row with nothing selected.
    x = rand(64, 32)
    lo, hi = bounds(64, 32)
    out, best = run(range_select_kernel(dst_dtype=nl.bfloat16), "numpy", x, lo, hi)
    j = np.arange(32)[None, :]
    keep = (j >= lo) & (j < hi)
    want = np.where(keep, x.astype(ml_dtypes.bfloat16).astype(np.float32), -np.inf)
    np.testing.assert_array_equal(out.astype(np.float32), want)
    np.testing.assert_array_equal(best, np.where(keep, x, FP32_MIN).max(axis=1, keepdims=True))
    assert best[0, 0] == FP32_MIN


@nki.jit
def legacy_range_select_kernel(x, lo, hi):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = lisa.range_select(
        on_true_tile=nl.load(x),
        comp_op0=nl.greater,
        comp_op1=nl.less_equal,
        bound0=nl.load(lo),
        bound1=nl.load(hi),
        range_start=3,
        on_false_value=-1.0,
    )
    nl.store(out, value=t)
    return out


def test_legacy_range_select_returns_a_tile():
    x = rand(32, 20)
    lo, hi = bounds(32, 24)
    j = np.arange(20)[None, :] + 3
    want = np.where((j > lo) & (j <= hi), x, -1.0)
    np.testing.assert_array_equal(run(legacy_range_select_kernel, "numpy", x, lo, hi), want)


def bad_range_select(case):
    @nki.jit
    def kernel(x, lo):
        t = nl.load(x)
        b = nl.load(lo)
        d = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        if case == "int_bound":
            bi = nl.ndarray((x.shape[0], 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.range_select(
                dst=d, on_true_tile=t, comp_op0=nl.less, comp_op1=nl.less, bound0=bi, bound1=b
            )
        elif case == "comp_op":
            nisa.range_select(
                dst=d, on_true_tile=t, comp_op0=nl.add, comp_op1=nl.less, bound0=b, bound1=b
            )
        elif case == "bound_shape":
            nisa.range_select(
                dst=d, on_true_tile=t, comp_op0=nl.less, comp_op1=nl.less, bound0=t, bound1=b
            )
        elif case == "reduce_cmd":
            nisa.range_select(
                dst=d,
                on_true_tile=t,
                comp_op0=nl.less,
                comp_op1=nl.less,
                bound0=b,
                bound1=b,
                reduce_res=r,
                reduce_cmd=nisa.reduce_cmd.reduce,
            )
        return x

    return kernel


@pytest.mark.parametrize(
    "case, phrases",
    [
        ("int_bound", ["bound0 is int32", "float32"]),
        ("comp_op", ["comp_op0 must be a comparison"]),
        ("bound_shape", ["bound0 [32, 16] must hold one value per partition"]),
        ("reduce_cmd", ["reduce_cmd=reduce", "not supported yet"]),
    ],
)
def test_range_select_rules_are_errors_at_the_kernel_line(case, phrases):
    expect_error(
        bad_range_select(case),
        [rand(32, 16), rand(32, 1)],
        "nisa.range_select(",
        *phrases,
        case=case,
    )


# select_reduce ----------------------------------------------------------------------
def select_reduce_kernel(scalar_false, reverse, dst_dtype=nl.float32):
    @nki.jit
    def kernel(x, pred, other):
        out = nl.ndarray(x.shape, dtype=dst_dtype, buffer=nl.shared_hbm)
        row_max = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        d = nl.ndarray(x.shape, dtype=dst_dtype, buffer=nl.sbuf)
        r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.select_reduce(
            dst=d,
            predicate=nl.load(pred),
            on_true=nl.load(x),
            on_false=-5.0 if scalar_false else nl.load(other),
            reduce_res=r,
            reduce_op=nl.maximum,
            reverse_pred=reverse,
        )
        nl.store(out, value=d)
        nl.store(row_max, value=r)
        return out, row_max

    return kernel


@pytest.mark.parametrize("scalar_false", [True, False])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("device", ["numpy", *DEVICES])
def test_select_reduce(scalar_false, reverse, device):
    x = rand(128, 40)
    pred = (RNG.random((128, 40)) > 0.5).astype(np.uint8)
    other = rand(128, 1)
    out, best = run(select_reduce_kernel(scalar_false, reverse), device, x, pred, other)
    keep = (pred != 0) != reverse
    want = np.where(keep, x, -5.0 if scalar_false else other)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(best, want.max(axis=1, keepdims=True))


def bad_select_reduce(case):
    @nki.jit
    def kernel(x):
        t = nl.load(x)
        d = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        p = nl.ndarray(x.shape, dtype=nl.uint8, buffer=nl.sbuf)
        if case == "predicate_dtype":
            nisa.select_reduce(dst=d, predicate=t, on_true=t, on_false=0.0)
        elif case == "reduce_op":
            nisa.select_reduce(
                dst=d, predicate=p, on_true=t, on_false=0.0, reduce_res=r, reduce_op=nl.add
            )
        elif case == "on_false_shape":
            nisa.select_reduce(dst=d, predicate=p, on_true=t, on_false=t)
        return x

    return kernel


@pytest.mark.parametrize(
    "case, phrases",
    [
        ("predicate_dtype", ["predicate is float32"]),
        ("reduce_op", ["reduce_op only supports max"]),
        ("on_false_shape", ["one value per partition"]),
    ],
)
def test_select_reduce_rules_are_errors_at_the_kernel_line(case, phrases):
    expect_error(bad_select_reduce(case), [rand(16, 8)], "nisa.select_reduce(", *phrases, case=case)


# tensor_copy_predicated -------------------------------------------------------------
def copy_predicated_kernel(src_kind, reverse=False):
    @nki.jit
    def kernel(x, y, pred):
        out = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.shared_hbm)
        d = nl.load(y)
        if src_kind == "tile":
            src = nl.load(x)
        elif src_kind == "psum":
            src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.psum)
            nisa.tensor_copy(dst=src, src=nl.load(x))
        else:
            src = 2.5
        nisa.tensor_copy_predicated(dst=d, src=src, predicate=nl.load(pred), reverse_pred=reverse)
        nl.store(out, value=d)
        return out

    return kernel


@pytest.mark.parametrize("src_kind", ["tile", "psum", "scalar"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("device", ["numpy", *DEVICES])
def test_tensor_copy_predicated(src_kind, reverse, device):
    x, y = rand(64, 30), rand(64, 30)
    pred = RNG.integers(0, 3, (64, 30)).astype(np.uint16)
    got = run(copy_predicated_kernel(src_kind, reverse), device, x, y, pred)
    src = 2.5 if src_kind == "scalar" else x
    np.testing.assert_array_equal(got, np.where((pred != 0) != reverse, src, y))


@nki.jit
def int_copy_predicated_kernel(y, pred):
    """NKI-lib's form: a [1, n] int32 tile overwritten with a constant where
    a uint8 flag is set."""
    out = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.shared_hbm)
    d = nl.load(y)
    fill = nl.ndarray(y.shape, dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=fill, value=7)
    nisa.tensor_copy_predicated(dst=d, src=fill, predicate=nl.load(pred))
    nl.store(out, value=d)
    return out


def test_tensor_copy_predicated_on_integers():
    y = RNG.integers(0, 100, (1, 12)).astype(np.int32)
    pred = RNG.integers(0, 2, (1, 12)).astype(np.uint8)
    got = run(int_copy_predicated_kernel, "numpy", y, pred)
    np.testing.assert_array_equal(got, np.where(pred != 0, 7, y))


def bad_copy_predicated(case):
    @nki.jit
    def kernel(x):
        t = nl.load(x)
        d = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        p = nl.ndarray(x.shape, dtype=nl.uint8, buffer=nl.sbuf)
        if case == "predicate_dtype":
            nisa.tensor_copy_predicated(dst=d, src=t, predicate=t)
        elif case == "dtype":
            h = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
            nisa.tensor_copy_predicated(dst=h, src=t, predicate=p)
        elif case == "both_psum":
            ps = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.psum)
            pp = nl.ndarray(x.shape, dtype=nl.uint8, buffer=nl.psum)
            nisa.tensor_copy_predicated(dst=d, src=ps, predicate=pp)
        elif case == "shape":
            nisa.tensor_copy_predicated(dst=d, src=t[0:8, :], predicate=p)
        return x

    return kernel


@pytest.mark.parametrize(
    "case, phrases",
    [
        ("predicate_dtype", ["predicate is float32", "uint8, uint16 or uint32"]),
        ("dtype", ["src is float32 and dst bfloat16"]),
        ("both_psum", ["cannot both be in PSUM"]),
        ("shape", ["src [8, 8] must have the partitions"]),
    ],
)
def test_tensor_copy_predicated_rules_are_errors_at_the_kernel_line(case, phrases):
    expect_error(
        bad_copy_predicated(case),
        [rand(16, 8)],
        "nisa.tensor_copy_predicated(",
        *phrases,
        case=case,
    )


# tensor_scalar_reduce ---------------------------------------------------------------
def scalar_reduce_kernel(
    reduce_op, operand_tile=False, dst_dtype=nl.float32, load_init=None, negate=False
):
    @nki.jit
    def kernel(x, s):
        out = nl.ndarray(x.shape, dtype=dst_dtype, buffer=nl.shared_hbm)
        red = nl.ndarray((x.shape[0], 4), dtype=nl.float32, buffer=nl.shared_hbm)
        d = nl.ndarray(x.shape, dtype=dst_dtype, buffer=nl.sbuf)
        r = nl.ndarray((x.shape[0], 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=r, value=0.0)
        kwargs = {}
        if load_init is not None:
            kwargs = dict(reduce_cmd=nisa.reduce_cmd.load_reduce, reduce_init=load_init)
        nisa.tensor_scalar_reduce(
            dst=d,
            data=nl.load(x),
            op0=nl.multiply,
            operand0=nl.load(s) if operand_tile else 0.5,
            reduce_op=reduce_op,
            reduce_res=r[:, 2],  # a [P] column, as NKI-lib indexes it
            reduce_res_negate=negate,
            **kwargs,
        )
        nl.store(out, value=d)
        nl.store(red, value=r)
        return out, red

    return kernel


@pytest.mark.parametrize(
    "reduce_op, fn", [(nl.add, np.sum), (nl.maximum, np.max), (nl.minimum, np.min)]
)
@pytest.mark.parametrize("device", ["numpy", *DEVICES])
def test_tensor_scalar_reduce(reduce_op, fn, device):
    x, s = rand(128, 50), rand(128, 1)
    out, red = run(scalar_reduce_kernel(reduce_op, operand_tile=True), device, x, s)
    want = x * s
    np.testing.assert_array_equal(out, want)
    np.testing.assert_allclose(red[:, 2], fn(want, axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(red[:, [0, 1, 3]], 0.0)


def test_tensor_scalar_reduce_into_bfloat16_with_load_reduce_and_negate():
    x, s = rand(32, 16), rand(32, 1)
    out, red = run(
        scalar_reduce_kernel(nl.maximum, dst_dtype=nl.bfloat16, load_init=1.0, negate=True),
        "numpy",
        x,
        s,
    )
    want = x * 0.5
    np.testing.assert_array_equal(
        out.astype(np.float32), want.astype(ml_dtypes.bfloat16).astype(np.float32)
    )
    np.testing.assert_array_equal(red[:, 2], -np.maximum(want.max(axis=1), 1.0))


@nki.jit
def legacy_scalar_reduce_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    total = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    t = lisa.tensor_scalar_reduce(
        data=nl.load(x), op0=nl.add, operand0=1.0, reduce_op=nl.add, reduce_res=r
    )
    nl.store(out, value=t)
    nl.store(total, value=r)
    return out, total


def test_legacy_tensor_scalar_reduce_returns_a_tile():
    x = rand(16, 10)
    out, total = run(legacy_scalar_reduce_kernel, "numpy", x)
    np.testing.assert_array_equal(out, x + 1.0)
    np.testing.assert_allclose(total, (x + 1.0).sum(axis=1, keepdims=True), rtol=1e-5)


def bad_scalar_reduce(case):
    @nki.jit
    def kernel(x):
        t = nl.load(x)
        d = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        if case == "bitvec":
            nisa.tensor_scalar_reduce(
                dst=d, data=t, op0=nl.bitwise_and, operand0=1, reduce_op=nl.add, reduce_res=r
            )
        elif case == "reduce_op":
            nisa.tensor_scalar_reduce(
                dst=d, data=t, op0=nl.add, operand0=1.0, reduce_op=nl.divide, reduce_res=r
            )
        elif case == "reduce_res":
            nisa.tensor_scalar_reduce(
                dst=d, data=t, op0=nl.add, operand0=1.0, reduce_op=nl.add, reduce_res=d
            )
        elif case == "load_without_init":
            nisa.tensor_scalar_reduce(
                dst=d,
                data=t,
                op0=nl.add,
                operand0=1.0,
                reduce_op=nl.add,
                reduce_res=r,
                reduce_cmd=nisa.reduce_cmd.load_reduce,
            )
        return x

    return kernel


@pytest.mark.parametrize(
    "case, phrases",
    [
        ("bitvec", ["op0 must be an arithmetic operator", "bitwise_and"]),
        ("reduce_op", ["reduce_op must be add, subtract, multiply, max or min"]),
        ("reduce_res", ["reduce_res [16, 8] must hold one value per partition"]),
        ("load_without_init", ["load_reduce needs reduce_init"]),
    ],
)
def test_tensor_scalar_reduce_rules_are_errors_at_the_kernel_line(case, phrases):
    expect_error(
        bad_scalar_reduce(case), [rand(16, 8)], "nisa.tensor_scalar_reduce(", *phrases, case=case
    )
