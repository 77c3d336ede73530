"""RMSNorm and LayerNorm in NKI: 128 rows per tile, statistics in fp32
(bn_stats/bn_aggr for LayerNorm), column sums over rows as matmuls with a
ones vector."""

from __future__ import annotations

from .. import isa as nisa
from .. import language as nl
from ..kernel import jit


def _add_column_sums(acc, t, rows, F):
    """acc[1, F] += the sums over the rows (partitions) of t[rows, F]: a
    matmul with a ones vector, 512 columns (one PSUM bank) at a time."""
    ones = nl.full((rows, 1), 1.0, nl.float32)
    for c0 in nl.affine_range((F + 511) // 512):
        cols = slice(c0 * 512, min(F, (c0 + 1) * 512))
        acc[:, cols] = nl.add(acc[:, cols], nl.matmul(ones, t[:, cols], transpose_x=True))


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


@jit
def rmsnorm_bwd(dy, x, rstd, weight):
    """Gradients of rmsnorm_fwd: dx = rstd * (w*dy - x_hat * mean(x_hat * w*dy))
    with x_hat = x * rstd, and dw = sum over rows of dy * x_hat (weight may be
    None). x, dy (N, F); rstd (N,) fp32. Returns (dx, dw or None)."""
    N, F = x.shape
    dx = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.shared_hbm)
    dw = None
    if weight is not None:
        dw = nl.ndarray((F,), dtype=weight.dtype, buffer=nl.shared_hbm)
        w = nl.load(weight.reshape((1, F)), dtype=nl.float32).broadcast_to((128, F))
        dw_acc = nl.zeros((1, F), nl.float32)
    for i in nl.affine_range((N + 127) // 128):
        rows = min(128, N - i * 128)
        r0 = i * 128
        xt = nl.load(x[r0 : r0 + rows, :], dtype=nl.float32)
        g = nl.load(dy[r0 : r0 + rows, :], dtype=nl.float32)
        r = nl.load(rstd[r0 : r0 + rows]).reshape((rows, 1))
        xhat = nl.multiply(xt, r)
        gw = nl.multiply(g, w[0:rows, :]) if weight is not None else g
        c = nl.mean(nl.multiply(gw, xhat), axis=1, keepdims=True)
        dxt = nl.multiply(nl.subtract(gw, nl.multiply(xhat, c)), r, dtype=x.dtype)
        nl.store(dx[r0 : r0 + rows, :], value=dxt)
        if weight is not None:
            _add_column_sums(dw_acc, nl.multiply(g, xhat), rows, F)
    if weight is not None:
        nl.store(dw.reshape((1, F)), value=nl.copy(dw_acc, dtype=weight.dtype))
    return dx, dw


def _row_stats(t, rows, F):
    """(mean, var) of each row of an SBUF tile [rows, F] with bn_stats over
    512-column chunks and bn_aggr."""
    chunks = (F + 511) // 512
    stats = nl.ndarray((rows, 6 * chunks), dtype=nl.float32)
    for c in nl.affine_range(chunks):
        cols = slice(c * 512, min(F, (c + 1) * 512))
        nisa.bn_stats(dst=stats[:, c * 6 : (c + 1) * 6], data=t[:, cols])
    mv = nl.ndarray((rows, 2), dtype=nl.float32)
    nisa.bn_aggr(dst=mv, data=stats)
    return mv[:, 0:1], mv[:, 1:2]


@jit
def layernorm_fwd(x, weight, bias, eps=1e-5):
    """(x - mean) * rsqrt(var + eps) * weight + bias over the last dim of x
    (N, F); weight/bias (F,) or None. Returns (y, mean (N,), rstd (N,))."""
    N, F = x.shape
    y = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.shared_hbm)
    mean_out = nl.ndarray((N,), dtype=nl.float32, buffer=nl.shared_hbm)
    rstd_out = nl.ndarray((N,), dtype=nl.float32, buffer=nl.shared_hbm)
    if weight is not None:
        w = nl.load(weight.reshape((1, F)), dtype=nl.float32).broadcast_to((128, F))
    if bias is not None:
        b = nl.load(bias.reshape((1, F)), dtype=nl.float32).broadcast_to((128, F))
    for i in nl.affine_range((N + 127) // 128):
        rows = min(128, N - i * 128)
        r0 = i * 128
        t = nl.load(x[r0 : r0 + rows, :], dtype=nl.float32)
        mean, var = _row_stats(t, rows, F)
        rstd = nl.rsqrt(nl.add(var, eps))
        out = nl.ndarray((rows, F), dtype=nl.float32)
        nisa.tensor_scalar(
            dst=out, data=t, op0=nl.subtract, operand0=mean, op1=nl.multiply, operand1=rstd
        )
        if weight is not None:
            out = nl.multiply(out, w[0:rows, :])
        if bias is not None:
            out = nl.add(out, b[0:rows, :])
        nl.store(y[r0 : r0 + rows, :], value=nl.copy(out, dtype=x.dtype))
        nl.store(mean_out[r0 : r0 + rows], value=nl.copy(mean).reshape((rows,)))
        nl.store(rstd_out[r0 : r0 + rows], value=rstd.reshape((rows,)))
    return y, mean_out, rstd_out


@jit
def layernorm_bwd(dy, x, mean, rstd, weight, with_bias=True):
    """Gradients of layernorm_fwd: dx = rstd * (g - mean(g) - x_hat *
    mean(g * x_hat)) with g = dy * weight, x_hat = (x - mean) * rstd;
    dweight = sum of dy * x_hat over rows, dbias = sum of dy over rows.
    Returns (dx, dweight or None, dbias or None)."""
    N, F = x.shape
    dx = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.shared_hbm)
    dw = db = None
    if weight is not None:
        dw = nl.ndarray((F,), dtype=weight.dtype, buffer=nl.shared_hbm)
        w = nl.load(weight.reshape((1, F)), dtype=nl.float32).broadcast_to((128, F))
        dw_acc = nl.zeros((1, F), nl.float32)
    if with_bias:
        db = nl.ndarray(
            (F,), dtype=weight.dtype if weight is not None else x.dtype, buffer=nl.shared_hbm
        )
        db_acc = nl.zeros((1, F), nl.float32)
    for i in nl.affine_range((N + 127) // 128):
        rows = min(128, N - i * 128)
        r0 = i * 128
        xt = nl.load(x[r0 : r0 + rows, :], dtype=nl.float32)
        g = nl.load(dy[r0 : r0 + rows, :], dtype=nl.float32)
        mu = nl.load(mean[r0 : r0 + rows]).reshape((rows, 1))
        r = nl.load(rstd[r0 : r0 + rows]).reshape((rows, 1))
        xhat = nl.ndarray((rows, F), dtype=nl.float32)
        nisa.tensor_scalar(
            dst=xhat, data=xt, op0=nl.subtract, operand0=mu, op1=nl.multiply, operand1=r
        )
        gw = nl.multiply(g, w[0:rows, :]) if weight is not None else g
        c1 = nl.mean(gw, axis=1, keepdims=True)
        c2 = nl.mean(nl.multiply(gw, xhat), axis=1, keepdims=True)
        dxt = nl.multiply(nl.subtract(nl.subtract(gw, c1), nl.multiply(xhat, c2)), r)
        nl.store(dx[r0 : r0 + rows, :], value=nl.copy(dxt, dtype=x.dtype))
        if weight is not None:
            _add_column_sums(dw_acc, nl.multiply(g, xhat), rows, F)
        if with_bias:
            _add_column_sums(db_acc, g, rows, F)
    if weight is not None:
        nl.store(dw.reshape((1, F)), value=nl.copy(dw_acc, dtype=weight.dtype))
    if with_bias:
        nl.store(db.reshape((1, F)), value=nl.copy(db_acc, dtype=db.dtype))
    return dx, dw, db
