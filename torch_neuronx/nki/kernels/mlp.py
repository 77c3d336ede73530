"""The SwiGLU MLP and the MoE grouped matmul in NKI.

Both multiply row tiles of activations by weight matrices: a row tile
x [128 tokens, K] is transposed on the Tensor engine into K-chunks
[128, 128 tokens] (the matmul contracts over partitions) and multiplied by
weight tiles [128, <= 512] into PSUM, accumulating over K.
"""

from __future__ import annotations

from .. import language as nl
from ..kernel import jit
from ._tiles import matmul_to_psum, transposed


def _transposed_chunks(t, rows, K, dtype):
    """x^T of an SBUF tile [rows, K] as K/128 tiles [128, rows]."""
    return [transposed(t[:, c * 128 : (c + 1) * 128], dtype) for c in range(K // 128)]


def _matmul_rows(x_t, w, k0_rows, n0, n, dtype):
    """sum over K chunks of x_t[c]^T @ w[chunk c rows, n0:n0+n] -> PSUM [rows, n]."""
    acc = None
    for c, xc in enumerate(x_t):
        wt = nl.load(w[k0_rows + c * 128 : k0_rows + (c + 1) * 128, n0 : n0 + n], dtype=dtype)
        r = matmul_to_psum(xc, wt)
        acc = r if acc is None else nl.add(acc, r)
    return acc


@jit
def swiglu_mlp(x, w_gate, w_up, w_down):
    """(silu(x @ w_gate) * (x @ w_up)) @ w_down for x (N, H), w_gate and w_up
    (H, I), w_down (I, H); H and I multiples of 128."""
    N, H = x.shape
    I = w_gate.shape[1]  # noqa: E741
    assert H % 128 == 0 and I % 128 == 0, (H, I)
    mm = nl.bfloat16 if x.dtype != nl.float32 else nl.float32
    out = nl.ndarray((N, H), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range((N + 127) // 128):
        r0 = i * 128
        rows = min(128, N - r0)
        xt = nl.load(x[r0 : r0 + rows, :], dtype=mm)
        x_t = _transposed_chunks(xt, rows, H, mm)
        hidden = nl.ndarray((rows, I), dtype=mm)
        for n0 in range(0, I, 512):
            n = min(512, I - n0)
            gate = _matmul_rows(x_t, w_gate, 0, n0, n, mm)
            up = _matmul_rows(x_t, w_up, 0, n0, n, mm)
            hidden[:, n0 : n0 + n] = nl.multiply(nl.silu(gate), up, dtype=mm)
        h_t = _transposed_chunks(hidden, rows, I, mm)
        for n0 in range(0, H, 512):
            n = min(512, H - n0)
            y = _matmul_rows(h_t, w_down, 0, n0, n, mm)
            nl.store(out[r0 : r0 + rows, n0 : n0 + n], value=nl.copy(y, dtype=x.dtype))
    return out


@jit
def grouped_matmul(x, w, group_sizes):
    """MoE expert matmul: rows of x (T, K) sorted by expert, group_sizes[e]
    of them for expert e (a tuple: the trace depends on it), w (E, K, N):
    out[rows of e] = x[rows of e] @ w[e]. K a multiple of 128."""
    T, K = x.shape
    E, K2, N = w.shape
    assert K == K2 and K % 128 == 0 and len(group_sizes) == E and sum(group_sizes) == T
    mm = nl.bfloat16 if x.dtype != nl.float32 else nl.float32
    out = nl.ndarray((T, N), dtype=x.dtype, buffer=nl.shared_hbm)
    start = 0
    for e in range(E):
        for r0 in range(start, start + group_sizes[e], 128):
            rows = min(128, start + group_sizes[e] - r0)
            xt = nl.load(x[r0 : r0 + rows, :], dtype=mm)
            x_t = _transposed_chunks(xt, rows, K, mm)
            we = w[e]
            for n0 in range(0, N, 512):
                n = min(512, N - n0)
                y = _matmul_rows(x_t, we, 0, n0, n, mm)
                nl.store(out[r0 : r0 + rows, n0 : n0 + n], value=nl.copy(y, dtype=x.dtype))
        start += group_sizes[e]
    return out
