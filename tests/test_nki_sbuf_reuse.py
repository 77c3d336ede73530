"""SBUF space as the compiler allocates it: a tile allocated before a loop
and rewritten whole in each iteration is live only from a write to its last
read, so tiles whose values never overlap share the 224 KiB per partition
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


@nki.jit
def fills_neuroncore_v3_sbuf(x, extra):
    """Three 64 KiB tiles and one of 32 + `extra` KiB per partition, all live
    at the last add: NeuronCore-v3's SBUF is 28 MiB, 224 KiB per partition
    (192 KiB is NeuronCore-v2's)."""
    P = x.shape[0]
    a, b, c = _tiles(P)[:3]
    d = nl.ndarray((P, (32 + extra) * 256), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    nisa.activation(dst=b, op=nl.exp, data=a)
    nisa.memset(dst=d, value=1.0)
    nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.multiply)  # a, b, c, d live
    nisa.tensor_scalar(dst=c, data=c, op0=nl.add, operand0=d[:, 0:1])
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=c)
    return out


def test_neuroncore_v3_sbuf_holds_224_kib():
    x = np.random.default_rng(1).standard_normal((128, F)).astype(np.float32) * 0.1
    got = nki.simulate(fills_neuroncore_v3_sbuf)(x, 0)
    np.testing.assert_allclose(got, x * np.exp(x) + 1.0, rtol=1e-5, atol=1e-6)
    assert nki.estimate(fills_neuroncore_v3_sbuf, x, 0).sbuf_high_water_bytes == 224 * 1024
    # One KiB more per partition is a real overflow, listed tile by tile.
    with pytest.raises(NKIError, match="SBUF capacity exceeded") as e:
        nki.simulate(fills_neuroncore_v3_sbuf)(x, 1)
    assert e.value.limit == "sbuf-capacity"
    assert "230400 bytes per partition, SBUF has 229376 (224 KiB)" in str(e.value)
    assert "3 x sbuf tile [128, 16384] float32 allocated at" in str(e.value), str(e.value)
