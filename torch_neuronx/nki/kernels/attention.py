"""Flash attention in NKI: the online-softmax forward of FlashAttention-2,
one (batch, head) per grid instance, 128-row query tiles against 512-column
key/value tiles, causal or not, grouped-query (fewer key/value heads)."""

from __future__ import annotations

import math

from .. import language as nl
from .. import legacy_isa as nisa
from ..kernel import jit

Q_TILE = 128
KV_TILE = 512
NEG_INF = -30000.0  # masked scores: exp() of it underflows to 0 in fp32


@jit
def flash_attention_fwd(q, k, v, softmax_scale=None, causal=False):
    """softmax(q k^T * scale [+ causal mask]) v for q (B, H, S, D), k and v
    (B, KVH, S, D), H a multiple of KVH; launched on grid [B, H]. Returns
    (o (B, H, S, D), lse (B, H, S) fp32: the row log-sum-exp)."""
    B, H, S, D = q.shape
    KVH = k.shape[1]
    Sk = k.shape[2]
    assert S % Q_TILE == 0 and Sk % KV_TILE == 0 and D <= 128, (S, Sk, D)
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    b = nl.program_id(0)
    h = nl.program_id(1)
    kvh = h // (H // KVH)
    o = nl.ndarray((B, H, S, D), dtype=q.dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((B, H, S), dtype=nl.float32, buffer=nl.shared_hbm)
    mm_dtype = nl.bfloat16 if q.dtype != nl.float32 else nl.float32

    for qi in nl.affine_range(S // Q_TILE):
        q0 = qi * Q_TILE
        # q^T: head dim on the partitions (the matmul contracts over them),
        # transposed on the Tensor engine (a transposing DMA moves elements
        # one by one).
        q_t = nl.copy(nisa.nc_transpose(nl.load(q[b, h, q0 : q0 + Q_TILE, :], dtype=mm_dtype)))
        m = nl.full((Q_TILE, 1), NEG_INF, nl.float32)  # running row max (scaled)
        denom = nl.zeros((Q_TILE, 1), nl.float32)
        acc = nl.zeros((Q_TILE, D), nl.float32)
        n_kv = Sk // KV_TILE
        if causal:
            n_kv = (q0 + Q_TILE + KV_TILE - 1) // KV_TILE
        for ki in nl.sequential_range(n_kv):
            k0 = ki * KV_TILE
            k_t = nl.ndarray((D, KV_TILE), dtype=mm_dtype)
            for c in nl.affine_range(KV_TILE // 128):
                k_rows = nl.load(k[b, kvh, k0 + c * 128 : k0 + (c + 1) * 128, :], dtype=mm_dtype)
                k_t[:, c * 128 : (c + 1) * 128] = nisa.nc_transpose(k_rows)
            s = nisa.nc_matmul(q_t, k_t)  # [Q_TILE, KV_TILE] scores in PSUM
            if causal and k0 + KV_TILE > q0:
                i_q, i_k = nl.mgrid[0:Q_TILE, 0:KV_TILE]
                s = nisa.affine_select(q0 + i_q >= k0 + i_k, s, NEG_INF / scale,
                                       dtype=nl.float32)
            row_max = nisa.tensor_reduce(nl.maximum, s, axis=1, keepdims=True)
            m_new = nl.maximum(m, nl.multiply(row_max, scale))
            # p = exp(scale * s - m_new), its row sums on the way.
            row_sum = nl.ndarray((Q_TILE, 1), nl.float32)
            p = nisa.activation(nl.exp, s, bias=nl.negative(m_new), scale=scale,
                                reduce_op=nl.add, reduce_res=row_sum, dtype=mm_dtype)
            alpha = nl.exp(nl.subtract(m, m_new))
            denom = nl.add(nl.multiply(denom, alpha), row_sum)
            m = m_new
            # acc = acc * alpha + p @ v, 128 keys at a time.
            pv = nl.zeros((Q_TILE, D), nl.float32, buffer=nl.psum)
            for c in nl.affine_range(KV_TILE // 128):
                p_t = nl.copy(nisa.nc_transpose(p[:, c * 128 : (c + 1) * 128]), dtype=mm_dtype)
                v_tile = nl.load(v[b, kvh, k0 + c * 128 : k0 + (c + 1) * 128, :], dtype=mm_dtype)
                pv += nisa.nc_matmul(p_t, v_tile)
            acc = nl.add(nl.multiply(acc, alpha), pv)
        out = nl.multiply(acc, nl.reciprocal(denom), dtype=q.dtype)
        nl.store(o[b, h, q0 : q0 + Q_TILE, :], value=out)
        nl.store(lse[b, h, q0 : q0 + Q_TILE], value=nl.add(m, nl.log(denom)))
    return o, lse
