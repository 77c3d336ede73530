"""A DMA between accesses of different shapes and the same number of elements
moves them in row-major order (NKI's DMA semantics): a strided ``[d, h]``
pattern into a ``[d, 1, h]`` slice of a tile, a flat row into a 2-D block,
an ``.ap()`` view of another rank. Kernels written here, checked against
NumPy's reshape of the same elements."""

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch

from torch_neuronx.nki import NKIError
from torch_neuronx.nki.element_order import _common_shape
from torch_neuronx.nki.view import View

RNG = np.random.default_rng(3)


@nki.jit
def pairs_into_a_middle_unit_dim(w):
    # w: [2, d, h]; each [d, h] slab (strided: every other head) lands in
    # tile[:, k:k+1, :], a [d, 1, h] slice.
    _, d, h = w.shape
    tile = nl.ndarray((d, 2, h), dtype=w.dtype, buffer=nl.sbuf)
    for k in nl.static_range(2):
        nisa.dma_copy(dst=tile[:, k : k + 1, :], src=w.ap([[h, d], [1, h]], offset=k * d * h))
    out = nl.ndarray((d, 2, h), dtype=w.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


@nki.jit
def row_into_block(v):
    # v: [1, 8 * 16] in HBM, moved into an [8, 16] tile, then back out as [8, 16].
    tile = nl.ndarray((8, 16), dtype=v.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=v)
    out = nl.ndarray((8, 16), dtype=v.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


@nki.jit
def strided_split(a):
    # a: [4, 6] read with its columns split [4, 2, 3] into a [8, 3] tile.
    tile = nl.ndarray((8, 3), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=a)
    out = nl.ndarray((8, 3), dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


@pytest.mark.parametrize("device", ["cpu", "neuron"])
def test_a_slab_into_a_slice_with_a_unit_dim(device):
    w = RNG.standard_normal((2, 32, 48)).astype(np.float32)
    got = pairs_into_a_middle_unit_dim(torch.from_numpy(w).to(device)).cpu().numpy()
    np.testing.assert_array_equal(got, np.transpose(w, (1, 0, 2)))


@pytest.mark.parametrize(
    "kernel, shape, out_shape",
    [
        (row_into_block, (1, 128), (8, 16)),
        (strided_split, (4, 6), (8, 3)),
    ],
    ids=["row-into-block", "split-columns"],
)
def test_elements_move_in_row_major_order(kernel, shape, out_shape):
    a = RNG.standard_normal(shape).astype(np.float32)
    got = kernel(torch.from_numpy(a).to("neuron")).cpu().numpy()
    np.testing.assert_array_equal(got, a.reshape(out_shape))


def test_the_common_shape_of_two_shapes():
    assert [n for n, _, _ in _common_shape((6,), (3, 2))] == [3, 2]
    assert [n for n, _, _ in _common_shape((32, 1, 48), (32, 48))] == [32, 48]
    assert _common_shape((2, 3), (3, 2)) is None  # boundaries do not nest


@nki.jit
def not_nesting(a):
    tile = nl.ndarray((3, 2), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=a.ap([[1, 2], [2, 3]]))


def test_shapes_that_do_not_nest_are_an_error_at_the_kernel_line():
    with pytest.raises(
        NKIError, match=r"cannot pair source \[2, 3\] with destination \[3, 2\]"
    ) as e:
        not_nesting(torch.zeros(2, 3, device="neuron"))
    assert e.value.filename == __file__


def test_with_unit_dims_needs_no_contiguity():
    from torch_neuronx.nki.element_order import with_unit_dims
    from torch_neuronx.nki.trace import Trace
    from torch_neuronx.nki.trace_state import SBUF, state

    t = Trace(())
    prev = getattr(state, "trace", None)
    state.trace = t
    try:
        buf = t.new_buffer(SBUF, nl.float32, (128, 4, 64))
        tile = View(buf, 0, (128, 4, 64), (256, 64, 1))
        sl = tile[:, 2, 0:48]  # [128, 48], steps (256, 1): not contiguous
        v = with_unit_dims(sl, (128, 1, 48))
        assert v.shape == (128, 1, 48) and v.strides == (256, 0, 1) and v.offset == 128
        assert with_unit_dims(sl, (128, 2, 24)) is None
    finally:
        state.trace = prev


@nki.jit
def scatter_tile_columns(x, ids, out):
    # Rows of a [P, NB, H] tile's slices scattered into HBM rows chosen at run
    # time: the destination is a [P, 1, H] pattern with a vector_offset.
    P, NB, H = x.shape
    t = nl.ndarray((P, NB, H), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    idx = nl.ndarray((P, NB), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=ids)
    for b in range(NB):
        nisa.dma_copy(
            dst=out.ap(
                pattern=[[H, P], [1, 1], [1, H]],
                offset=0,
                vector_offset=idx.ap(pattern=[[NB, P], [1, 1]], offset=b),
                indirect_dim=0,
            ),
            src=t[:, b, 0:H],
        )
    return out


def test_a_tile_slice_scattered_to_run_time_rows_keeps_its_index():
    P, NB, T, H = 8, 2, 32, 16
    x = RNG.standard_normal((P, NB, H)).astype(np.float32)
    perm = RNG.permutation(T)[: P * NB].reshape(P, NB).astype(np.int32)
    out = np.zeros((T, H), dtype=np.float32)
    got = (
        scatter_tile_columns(
            torch.from_numpy(x).to("neuron"),
            torch.from_numpy(perm).to("neuron"),
            torch.from_numpy(out).to("neuron"),
        )
        .cpu()
        .numpy()
    )
    ref = out.copy()
    for b in range(NB):
        ref[perm[:, b]] = x[:, b, :]
    np.testing.assert_array_equal(got, ref)
