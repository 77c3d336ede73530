"""Rotary position embedding (rotate-half form, as Llama's) in NKI."""

from __future__ import annotations

from .. import language as nl
from ..kernel import jit


@jit
def rope_fwd(x, cos, sin):
    """x (N, D) rows (tokens x heads), cos/sin (N, D/2): the first half of
    each row becomes x1*cos - x2*sin, the second x2*cos + x1*sin. For the
    backward pass call it with -sin."""
    N, D = x.shape
    h = D // 2
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range((N + 127) // 128):
        rows = slice(i * 128, min(N, (i + 1) * 128))
        t = nl.load(x[rows, :], dtype=nl.float32)
        c = nl.load(cos[rows, :], dtype=nl.float32)
        s = nl.load(sin[rows, :], dtype=nl.float32)
        x1, x2 = t[:, 0:h], t[:, h:D]
        r = nl.ndarray(t.shape, dtype=x.dtype)
        r[:, 0:h] = nl.subtract(nl.multiply(x1, c), nl.multiply(x2, s), dtype=x.dtype)
        r[:, h:D] = nl.add(nl.multiply(x2, c), nl.multiply(x1, s), dtype=x.dtype)
        nl.store(out[rows, :], value=r)
    return out
