"""An instruction whose destination addresses one element from several positions
(a zero step: NKI-lib's RMSNorm idiom ``act.ap(pattern=[[1, 128], [0, F]])``, a
scratch column the activation's values are not kept in) still hands its full result
to what reads it in the kernel: ``activation_reduce``'s ``reduce_res`` is the sum of
every value, not of what the aliased destination kept."""

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch

F = 512


@nki.jit
def sum_of_squares(x_hbm, zero_step):
    out = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=x_hbm)
    ss = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    if zero_step:
        act = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        dst = act.ap(pattern=[[1, 128], [0, F]])
    else:
        act = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.sbuf)
        dst = act
    nisa.activation_reduce(dst=dst, op=nl.square, data=x, reduce_op=nl.add, reduce_res=ss)
    nisa.dma_copy(dst=out[:, 0:1], src=ss)
    nisa.dma_copy(dst=out[:, 1:2], src=act[:, F - 1 : F] if not zero_step else act)
    return out


def _expected(x):
    return np.concatenate([(x * x).sum(1, keepdims=True), x[:, -1:] ** 2], axis=1)


@pytest.mark.parametrize("zero_step", [False, True], ids=["full-destination", "zero-step"])
def test_activation_reduce_sums_every_value(zero_step):
    x = np.random.default_rng(0).standard_normal((128, F)).astype(np.float32)
    got = nki.simulate_kernel(sum_of_squares, x, zero_step)
    # reduce_res: the row sums of x*x; the destination keeps the last value written
    # to it (the last column's square), as the engine writes in order.
    np.testing.assert_allclose(got, _expected(x), rtol=2e-5, atol=1e-3)


def test_activation_reduce_into_zero_step_destination_on_neuron():
    x = torch.randn(128, F)
    got = sum_of_squares(x.to("neuron"), True).cpu()
    torch.testing.assert_close(got, torch.from_numpy(_expected(x.numpy())), rtol=2e-5, atol=1e-3)
