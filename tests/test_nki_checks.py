"""The simulator's checks: each hardware limit or language rule a kernel
breaks is an NKIError naming the kernel's source line, and nothing is left
broken behind it."""

import os

import neuronxcc.nki.isa as lisa
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch
from kernel_source import line_of

from torch_neuronx.nki import NKIError

HERE = os.path.basename(__file__)


def expect_error(kernel, args, text_in_kernel, limit, *phrases):
    with pytest.raises(NKIError) as info:
        kernel(*args)
    e = info.value
    assert e.limit == limit, str(e)
    assert e.lineno == line_of(kernel.fn, text_in_kernel), str(e)
    assert str(e).startswith(f"{e.filename}:{e.lineno}: ")
    assert os.path.basename(e.filename) == HERE
    for p in phrases:
        assert p in str(e), str(e)
    return e


A = np.zeros((256, 512), np.float32)


@nki.jit
def too_many_partitions(a):
    out = nl.ndarray((256, 512), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)  # 256 partitions
    nl.store(out, value=t)
    return out


def test_partition_dimension_over_128():
    expect_error(
        too_many_partitions,
        (A,),
        "nl.load(a)",
        "partition-dim",
        "partition dimension 256",
        "128 partitions",
    )


@nki.jit
def sbuf_overflow(a):
    out = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.shared_hbm)
    tiles = []
    for _i in nl.affine_range(120):
        tiles.append(nl.load(a[0:128, :]))  # 2 KiB per partition each
    acc = tiles[0]
    for t in tiles[1:]:
        acc = nl.add(acc, t)  # all 120 tiles live until here
    nl.store(out, value=acc)
    return out


def test_sbuf_capacity_counts_live_tiles():
    # The 113th tile of 2 KiB per partition does not fit next to the others
    # in NeuronCore-v3's 224 KiB.
    e = expect_error(
        sbuf_overflow,
        (A,),
        "tiles.append(nl.load",
        "sbuf-capacity",
        "SBUF capacity exceeded",
        "229376",
    )
    # The live tiles are listed by where they were allocated.
    assert f"113 x sbuf tile [128, 512] float32 allocated at {HERE}:" in str(e), str(e)


@nki.jit
def psum_overflow(a):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a[0:128, 0:128])
    banks = [nl.matmul(t, nl.load(a[0:128, :]), transpose_x=True) for _ in range(9)]
    acc = banks[0]
    for b in banks[1:]:
        acc = nl.add(acc, b)
    nl.store(out, value=acc)
    return out


def test_psum_has_eight_banks():
    e = expect_error(
        psum_overflow,
        (A,),
        "banks = [nl.matmul",
        "psum-capacity",
        "PSUM capacity exceeded",
        "9 banks",
    )
    # The nine banks, one allocation line: listed as one group.
    assert f"9 x psum tile [128, 512] float32 allocated at {HERE}:" in str(e), str(e)


@nki.jit
def wide_stationary(a):
    out = nl.ndarray((256, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    st = nl.load(a[0:128, 0:256])
    mv = nl.load(a[0:128, :])
    r = nisa.nc_matmul  # noqa: F841
    res = lisa.nc_matmul(st, mv)  # stationary free size 256
    nl.store(out[0:128], value=res)
    return out


@nki.jit
def wide_moving(a):
    out = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.shared_hbm)
    st = nl.load(a[0:128, 0:128])
    mv = nl.ndarray((128, 1024), dtype=nl.float32)
    nl.store(out, value=lisa.nc_matmul(st, mv))  # moving free size 1024
    return out


@nki.jit
def mixed_fp32_bf16(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=lisa.nc_matmul(nl.load(a), nl.load(b)))  # fp32 x bf16
    return out


def test_matmul_limits():
    expect_error(
        wide_stationary,
        (A,),
        "res = lisa.nc_matmul(st, mv)",
        "matmul-limit",
        "stationary free size 256",
    )
    expect_error(
        wide_moving, (A,), "lisa.nc_matmul(st, mv)", "matmul-limit", "moving free size 1024"
    )
    b = torch.zeros(128, 512, dtype=torch.bfloat16)
    a = torch.zeros(128, 128)
    expect_error(
        mixed_fp32_bf16, (a, b), "lisa.nc_matmul(nl.load(a)", "matmul-dtype", "both must be"
    )


@nki.jit
def oob_load(a):
    out = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(512)[None, :]
    t = nl.load(a[200 + i_p, i_f])  # rows 200..327 of 256
    nl.store(out, value=t)
    return out


@nki.jit
def oob_tile(a):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a[0:128, 0:64])
    nl.store(out, value=t[:, 32:96])  # columns 32..95 of a 64-wide tile
    return out


def test_out_of_bounds_hbm_and_tile_access():
    expect_error(
        oob_load,
        (A,),
        "t = nl.load(a[200 + i_p, i_f])",
        "out-of-bounds",
        "dimension 0",
        "has size 256",
        "from 200 to 327",
    )
    expect_error(oob_tile, (A,), "t[:, 32:96]", "out-of-bounds", "has size 64")


@nki.jit
def reads_never_written(a):
    out = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), dtype=a.dtype)
    u = nl.add(t, 1.0)  # t was never written
    nl.store(out, value=u)
    return out


def test_uninitialized_read_reaching_a_result():
    e = expect_error(
        reads_never_written,
        (A,),
        "u = nl.add(t, 1.0)",
        "uninitialized-read",
        "never written",
        "reach the kernel's",
    )
    assert f"{HERE}:{line_of(reads_never_written.fn, 'nl.store(out, value=u)')}" in str(e)


@nki.jit
def shifts_its_argument(a):
    nl.store(a[0:128], value=nl.load(a[128:256]))


def test_a_kernel_may_write_its_arguments_in_place():
    # NKI 0.7/0.8 kernels write arguments whether annotated nt.mutable_tensor
    # or not; the write lands in the caller's tensor.
    a = torch.arange(256 * 4, dtype=torch.float32).reshape(256, 4)
    expected = a.clone()
    expected[0:128] = a[128:256]
    an = a.to("neuron")
    shifts_its_argument(an)
    torch.testing.assert_close(an.cpu(), expected)


@nki.jit
def tile_on_hbm(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.exp(a))  # HBM operand
    return out


def test_compute_on_hbm_operand():
    expect_error(tile_on_hbm, (A,), "nl.exp(a)", "buffer", "load it first")


def test_errors_leave_the_process_and_device_usable():
    for _ in range(3):
        with pytest.raises(NKIError):
            oob_load(A)
    x = torch.ones(4, device="neuron")
    assert (x + 1).sum().item() == 8.0

    @nki.jit
    def ok(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        return out

    np.testing.assert_array_equal(ok(A[:128]), A[:128])


def test_calling_language_functions_outside_a_kernel():
    with pytest.raises(NKIError, match="only be called while a kernel runs"):
        nl.load(A)


def _random_kernel(rng):
    """A random little kernel: loads, element-wise ops, reductions, matmuls
    and stores with random (often invalid) shapes and offsets."""
    P = int(rng.choice([1, 7, 64, 128, 129, 200]))
    F = int(rng.choice([1, 3, 128, 512, 600, 70000]))
    off = int(rng.integers(-3, 300))
    ops = rng.integers(0, 6, size=int(rng.integers(1, 6)))

    @nki.jit
    def k(a):
        out = nl.ndarray((256, 1024), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a[off : off + P, 0:F])
        for op in ops:
            if op == 0:
                t = nl.exp(t)
            elif op == 1:
                t = nl.sum(t, axis=1, keepdims=True)
            elif op == 2:
                t = nl.matmul(t, t, transpose_x=True)
            elif op == 3:
                t = nl.transpose(t)
            elif op == 4:
                t = t[0 : P // 2 + 1, 0:F]
            else:
                t = nl.ndarray((P, F), dtype=nl.float32)
        nl.store(out[0 : t.shape[0], 0 : t.shape[1]], value=t)
        return out

    return k


def test_fuzzed_kernels_never_crash():
    rng = np.random.default_rng(1234)
    a = np.ones((256, 1024), np.float32)
    outcomes = {"ok": 0, "error": 0}
    for _ in range(60):
        try:
            _random_kernel(rng)(a)
            outcomes["ok"] += 1
        except NKIError as e:
            assert ":" in str(e)
            outcomes["error"] += 1
    assert outcomes["ok"] > 0 and outcomes["error"] > 0, outcomes
