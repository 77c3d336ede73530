"""``t.ap(pattern=..., offset=...)`` past the end of its tensor: building the
view is not an error (NKI-lib's tile loops build views they never use); an
instruction that uses it is, at the instruction's line, naming the line
that built it. Kernels written here."""

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch
from kernel_source import line_of

from torch_neuronx.nki import NKIError


@nki.jit
def builds_but_never_uses(a):
    P, F = a.shape
    out = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.shared_hbm)
    tile = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=a.ap([[F, P], [1, F]]))
    # The next block's view reaches past the end; the loop stops before it.
    _ = a.ap([[F, P], [1, F]], offset=P * F)
    nisa.dma_copy(dst=out, src=tile)
    return out


@nki.jit
def uses_a_view_past_the_end(a):
    P, F = a.shape
    tile = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    view = a.ap([[F, P], [1, F]], offset=F)
    nisa.dma_copy(dst=tile, src=view)


def test_a_view_past_the_end_that_is_never_used_is_fine():
    x = np.random.default_rng(1).standard_normal((128, 16)).astype(np.float32)
    got = builds_but_never_uses(torch.from_numpy(x).to("neuron"))
    np.testing.assert_array_equal(got.cpu().numpy(), x)


def test_using_it_is_an_error_at_the_instruction_naming_the_ap_line():
    fn = uses_a_view_past_the_end.fn
    with pytest.raises(NKIError, match=r"reaches elements 16\.\.2063 of .*which has 2048") as e:
        uses_a_view_past_the_end(torch.zeros(128, 16, device="neuron"))
    assert e.value.lineno == line_of(fn, "nisa.dma_copy(dst=tile, src=view)")
    assert f"built by ap() at line {line_of(fn, 'a.ap(')}" in str(e.value)
    assert e.value.limit == "out-of-bounds"
