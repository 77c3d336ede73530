"""Row softmax in NKI (over the last dim of a 2-D tensor)."""

from __future__ import annotations

from .. import isa as nisa
from .. import language as nl
from ..kernel import jit


@jit
def softmax_fwd(x):
    N, F = x.shape
    y = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range((N + 127) // 128):
        rows = min(128, N - i * 128)
        t = nl.load(x[i * 128 : i * 128 + rows, :], dtype=nl.float32)
        neg_max = nl.ndarray((rows, 1), nl.float32)
        nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=t, axis=1, keepdims=True, negate=True)
        e = nl.ndarray((rows, F), nl.float32)
        row_sum = nl.ndarray((rows, 1), nl.float32)
        nisa.activation(
            dst=e, op=nl.exp, data=t, bias=neg_max, reduce_op=nl.add, reduce_res=row_sum
        )
        nl.store(
            y[i * 128 : i * 128 + rows, :],
            value=nl.multiply(e, nl.reciprocal(row_sum), dtype=x.dtype),
        )
    return y
