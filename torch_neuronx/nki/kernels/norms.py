"""RMSNorm in NKI: 128 rows per tile, statistics in fp32."""

from __future__ import annotations

from .. import language as nl
from ..kernel import jit


@jit
def rmsnorm_fwd(x, weight, eps=1e-6):
    """x * rsqrt(mean(x^2) + eps) * weight over the last dim of x (N, F);
    weight (F,) or None. Returns (y (N, F), rstd (N,) fp32)."""
    N, F = x.shape
    y = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.shared_hbm)
    rstd_out = nl.ndarray((N,), dtype=nl.float32, buffer=nl.shared_hbm)
    if weight is not None:
        w = nl.load(weight.reshape((1, F)), dtype=nl.float32).broadcast_to((128, F))
    for i in nl.affine_range((N + 127) // 128):
        rows = min(128, N - i * 128)
        t = nl.load(x[i * 128 : i * 128 + rows, :], dtype=nl.float32)
        ms = nl.mean(nl.square(t), axis=1, keepdims=True)
        rstd = nl.rsqrt(nl.add(ms, eps))
        out = nl.multiply(t, rstd)
        if weight is not None:
            out = nl.multiply(out, w[0:rows, :])
        nl.store(y[i * 128 : i * 128 + rows, :], value=out)
        nl.store(rstd_out[i * 128 : i * 128 + rows], value=rstd.reshape((rows,)))
    return y, rstd_out
