"""``nisa.dma_transpose`` over 2-D, 3-D and 4-D sources with NKI's
permutations — (1, 0), (2, 1, 0), (3, 1, 2, 0): the i-th axis of the result is
axis ``axes[i]`` of the source — in the destination-first form and the
original one, from HBM and from SBUF, and the errors for what NKI does not
support. Kernels written here, checked against NumPy's transpose."""

import neuronxcc.nki.isa as legacy_isa
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch

from torch_neuronx.nki import NKIError

RNG = np.random.default_rng(7)
PERMUTATION = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}
SHAPES = [(64, 32), (4, 3, 128), (16, 2, 3, 32), (96, 1, 1, 64)]


@nki.jit
def transpose_from_hbm(a):
    perm = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}[len(a.shape)]
    shape = tuple(a.shape[k] for k in perm)
    tile = nl.ndarray(shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=tile, src=a)
    out = nl.ndarray(shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


@nki.jit
def transpose_from_sbuf_legacy(a):
    tile = nl.load(a)
    t = legacy_isa.dma_transpose(tile)
    out = nl.ndarray(t.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=t)
    return out


@nki.jit
def transpose_ap_4d(a):
    # NKI-lib's idiom: a [P, F] tensor read as a 4-D pattern [P, 1, 1, F]
    # and written to a [F, 1, 1, P] pattern of a 2-D tile.
    P, F = a.shape
    tile = nl.ndarray((F, P), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(
        dst=tile.ap([[P, F], [1, 1], [1, 1], [1, P]]),
        src=a.ap([[F, P], [1, 1], [1, 1], [1, F]]),
    )
    out = nl.ndarray((F, P), dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("device", ["cpu", "neuron"])
def test_dma_transpose_permutes_as_nki_documents(shape, device):
    x = RNG.standard_normal(shape).astype(np.float32)
    want = np.transpose(x, PERMUTATION[len(shape)])
    got = transpose_from_hbm(torch.from_numpy(x).to(device))
    assert tuple(got.shape) == want.shape
    np.testing.assert_array_equal(got.cpu().numpy(), want)


@pytest.mark.parametrize("shape", [(64, 32), (16, 2, 3, 32)], ids=str)
def test_the_original_form_returns_the_transposed_tile(shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    got = transpose_from_sbuf_legacy(torch.from_numpy(x).to("neuron"))
    np.testing.assert_array_equal(got.cpu().numpy(), np.transpose(x, PERMUTATION[len(shape)]))


def test_a_4d_access_pattern_transpose_bf16():
    x = torch.randn(96, 64).to(torch.bfloat16)
    got = transpose_ap_4d(x.to("neuron"))
    torch.testing.assert_close(got.cpu(), x.t(), rtol=0, atol=0)


@nki.jit
def wrong_axes(a):
    tile = nl.ndarray((a.shape[1], a.shape[0], a.shape[2]), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=tile, src=a, axes=(1, 0, 2))


@nki.jit
def wrong_dst_shape(a):
    tile = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=tile, src=a)


@nki.jit
def wrong_dst_dtype(a):
    tile = nl.ndarray((a.shape[1], a.shape[0]), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_transpose(dst=tile, src=a)


@nki.jit
def five_dims(a):
    tile = nl.ndarray((2, 2, 2, 2, 2), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=tile, src=a.reshape((2, 2, 2, 2, 2)))


@pytest.mark.parametrize(
    "kernel, shape, match",
    [
        (wrong_axes, (4, 8, 16), r"supports axes \(2, 1, 0\), got \(1, 0, 2\)"),
        (wrong_dst_shape, (32, 64), r"dst is \[32, 64\], the transposed source is \[64, 32\]"),
        (wrong_dst_dtype, (32, 64), "keeps the element type"),
        (five_dims, (32,), "2-D, 3-D or 4-D source, got 5-D"),
    ],
    ids=["axes", "dst-shape", "dst-dtype", "5-D"],
)
def test_what_nki_does_not_support_is_an_error_at_the_kernel_line(kernel, shape, match):
    x = torch.zeros(shape, device="neuron")
    with pytest.raises(NKIError, match=match) as e:
        kernel(x)
    assert e.value.filename == __file__
    # The process goes on: a good kernel still runs.
    y = torch.ones(8, 4, device="neuron")
    assert transpose_from_hbm(y).shape == (4, 8)


@nki.jit
def nc_transpose_4d_patterns(a):
    # The Tensor engine's transpose between [P, 1, 1, F] and [F, 1, 1, P]
    # access patterns (NKI-lib's form): the unit dims carry no data.
    P, F = a.shape
    x = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    t = nl.ndarray((F, P), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_transpose(
        dst=t.ap([[P, F], [1, 1], [1, 1], [1, P]]),
        data=x.ap([[F, P], [1, 1], [1, 1], [1, F]]),
    )
    o = nl.ndarray((F, P), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=o, src=t)
    out = nl.ndarray((F, P), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=o)
    return out


def test_nc_transpose_between_4d_access_patterns():
    x = RNG.standard_normal((64, 32)).astype(np.float32)
    got = nc_transpose_4d_patterns(torch.from_numpy(x).to("neuron"))
    np.testing.assert_array_equal(got.cpu().numpy(), x.T)
