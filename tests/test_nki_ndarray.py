"""``nl.ndarray(shape, dtype, buffer, name)``: NKI's public signature, the buffer
and the name passed positionally as kernels written for NKI do."""

import nki
import nki.language as nl
import numpy as np
import pytest
import torch
from neuronxcc.nki import simulate_kernel

from torch_neuronx.nki import NKIError


@nki.jit
def add_positional(a, b):
    out = nl.ndarray(a.shape, a.dtype, nl.shared_hbm)  # buffer positionally
    tile = nl.ndarray((a.shape[0], a.shape[1]), nl.float32, nl.sbuf, "tile")  # and a name
    tile[...] = nl.add(nl.load(a), nl.load(b))
    nl.store(out, value=tile)
    return out


def test_buffer_and_name_positionally_on_neuron_and_numpy():
    a, b = torch.randn(128, 64, device="neuron"), torch.randn(128, 64, device="neuron")
    torch.testing.assert_close(add_positional(a, b).cpu(), (a + b).cpu())
    x = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_allclose(simulate_kernel(add_positional, x, x), 2 * x, rtol=1e-6)


def test_a_bad_positional_buffer_is_an_nki_error():
    @nki.jit
    def bad(a):
        out = nl.ndarray(a.shape, a.dtype, "dram")
        nl.store(out, value=nl.load(a))
        return out

    with pytest.raises(NKIError, match="dram"):
        bad(torch.randn(128, 8, device="neuron"))
