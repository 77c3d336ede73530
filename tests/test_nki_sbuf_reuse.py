"""SBUF space as the compiler allocates it: a tile allocated before a loop
and rewritten whole in each iteration is live only from a write to its last
read, so tiles whose values never overlap share the 192 KiB per partition
(NKI-lib's cross-entropy backward relies on it). A value carried into the
next iteration keeps its tile live. Kernels written here."""

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest

from torch_neuronx.nki import NKIError

F = 16384  # fp32: 64 KiB per partition per tile; four of them are 256 KiB


def _tiles(P):
    return [nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf) for _ in range(4)]


@nki.jit
def pipeline_of_four_tiles(x):
    P = x.shape[0]
    a, b, c, d = _tiles(P)
    out = nl.ndarray((2, P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    for k in range(2):
        nisa.dma_copy(dst=a, src=x)
        nisa.activation(dst=b, op=nl.exp, data=a)
        nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.multiply)  # a, b, c live
        nisa.tensor_scalar(dst=d, data=c, op0=nl.add, operand0=float(k))  # d rewritten whole
        nisa.dma_copy(dst=out[k], src=d)
    return out


@nki.jit
def carries_a_tile_across_iterations(x):
    P = x.shape[0]
    a, b, c, d = _tiles(P)
    nisa.memset(dst=d, value=0.0)
    for _ in range(2):
        nisa.dma_copy(dst=a, src=x)
        nisa.activation(dst=b, op=nl.exp, data=a)
        nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.multiply)
        # d is read here and in the next iteration: live throughout, so the
        # previous instruction has all four tiles live.
        nisa.tensor_tensor(dst=d, data1=d, data2=c, op=nl.add)
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=d)
    return out


def test_tiles_rewritten_each_iteration_share_sbuf():
    x = np.random.default_rng(0).standard_normal((128, F)).astype(np.float32) * 0.1
    got = nki.simulate(pipeline_of_four_tiles)(x)
    for k in range(2):
        np.testing.assert_allclose(got[k], x * np.exp(x) + k, rtol=1e-5, atol=1e-6)
    profile = nki.estimate(pipeline_of_four_tiles, x)
    # Never more than three of the four 64 KiB tiles hold a value at once.
    assert profile.sbuf_high_water_bytes == 3 * F * 4


def test_a_value_carried_to_the_next_iteration_keeps_its_tile():
    x = np.zeros((128, F), dtype=np.float32)
    with pytest.raises(NKIError, match="SBUF capacity exceeded") as e:
        nki.simulate(carries_a_tile_across_iterations)(x)
    assert e.value.limit == "sbuf-capacity"
