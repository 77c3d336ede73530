"""Flash attention in NKI: the online-softmax forward of FlashAttention-2,
one (batch, head) per grid instance, 128-row query tiles against 512-column
key/value tiles, causal or not, grouped-query (fewer key/value heads)."""

from __future__ import annotations

import math

from .. import isa as nisa
from .. import language as nl
from ..kernel import jit
from ._tiles import matmul_to_psum, transposed

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
    assert S % Q_TILE == 0 and Sk % 128 == 0 and D <= 128, (S, Sk, D)
    # Key tiles as wide as a PSUM bank allows (512 fp32 scores) and Sk divides.
    KV = next(t for t in (KV_TILE, 256, 128) if Sk % t == 0)
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
        q_t = transposed(nl.load(q[b, h, q0 : q0 + Q_TILE, :], dtype=mm_dtype), mm_dtype)
        m = nl.full((Q_TILE, 1), NEG_INF, nl.float32)  # running row max (scaled)
        denom = nl.zeros((Q_TILE, 1), nl.float32)
        acc = nl.zeros((Q_TILE, D), nl.float32)
        n_kv = Sk // KV
        if causal:
            n_kv = (q0 + Q_TILE + KV - 1) // KV
        for ki in nl.sequential_range(n_kv):
            k0 = ki * KV
            k_t = nl.ndarray((D, KV), dtype=mm_dtype)
            for c in nl.affine_range(KV // 128):
                k_rows = nl.load(k[b, kvh, k0 + c * 128 : k0 + (c + 1) * 128, :], dtype=mm_dtype)
                k_ps = nl.ndarray((D, 128), dtype=mm_dtype, buffer=nl.psum)
                nisa.nc_transpose(dst=k_ps, data=k_rows)
                nisa.tensor_copy(dst=k_t[:, c * 128 : (c + 1) * 128], src=k_ps)
            s = matmul_to_psum(q_t, k_t)  # [Q_TILE, KV_TILE] scores
            if causal and k0 + KV > q0:
                # Keep the scores of keys at or before the query (q0 + row >= k0 + col).
                masked = nl.ndarray((Q_TILE, KV), dtype=nl.float32)
                nisa.affine_select(
                    dst=masked,
                    pattern=[[-1, KV]],
                    offset=q0 - k0,
                    channel_multiplier=1,
                    on_true_tile=s,
                    on_false_value=NEG_INF / scale,
                    cmp_op=nl.greater_equal,
                )
                s = masked
            row_max = nl.ndarray((Q_TILE, 1), dtype=nl.float32)
            nisa.tensor_reduce(dst=row_max, op=nl.maximum, data=s, axis=1, keepdims=True)
            m_new = nl.maximum(m, nl.multiply(row_max, scale))
            # p = exp(scale * s - m_new), its row sums on the way.
            p = nl.ndarray((Q_TILE, KV), dtype=mm_dtype)
            row_sum = nl.ndarray((Q_TILE, 1), nl.float32)
            nisa.activation(
                dst=p,
                op=nl.exp,
                data=s,
                bias=nl.negative(m_new),
                scale=scale,
                reduce_op=nl.add,
                reduce_res=row_sum,
            )
            alpha = nl.exp(nl.subtract(m, m_new))
            denom = nl.add(nl.multiply(denom, alpha), row_sum)
            m = m_new
            # acc = acc * alpha + p @ v, 128 keys at a time.
            pv = nl.zeros((Q_TILE, D), nl.float32, buffer=nl.psum)
            for c in nl.affine_range(KV // 128):
                p_t = transposed(p[:, c * 128 : (c + 1) * 128], mm_dtype)
                v_tile = nl.load(v[b, kvh, k0 + c * 128 : k0 + (c + 1) * 128, :], dtype=mm_dtype)
                nisa.nc_matmul(dst=pv, stationary=p_t, moving=v_tile)  # accumulates in PSUM
            acc = nl.add(nl.multiply(acc, alpha), pv)
        out = nl.multiply(acc, nl.reciprocal(denom), dtype=q.dtype)
        nl.store(o[b, h, q0 : q0 + Q_TILE, :], value=out)
        nl.store(lse[b, h, q0 : q0 + Q_TILE], value=nl.add(m, nl.log(denom)))
    return o, lse


@jit
def flash_attention_bwd(q, k, v, o, d_o, lse, softmax_scale=None, causal=False):
    """Gradients of flash_attention_fwd: (dq, dk, dv) for q, o, d_o (B, H, S, D),
    k, v (B, KVH, Sk, D) and the forward's lse (B, H, S); launched on grid
    [B, KVH] (each instance owns one key/value head and the query heads that
    share it). FlashAttention-2's backward over 128 x 128 blocks: P is
    recomputed from lse, dK and dV accumulate in PSUM over the query tiles,
    dQ in SBUF over the key tiles."""
    B, H, S, D = q.shape
    KVH = k.shape[1]
    Sk = k.shape[2]
    T = 128
    assert S % T == 0 and Sk % T == 0 and D <= 128, (S, Sk, D)
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    group = H // KVH
    b = nl.program_id(0)
    kvh = nl.program_id(1)
    dq = nl.ndarray((B, H, S, D), dtype=q.dtype, buffer=nl.shared_hbm)
    dk = nl.ndarray((B, KVH, Sk, D), dtype=k.dtype, buffer=nl.shared_hbm)
    dv = nl.ndarray((B, KVH, Sk, D), dtype=v.dtype, buffer=nl.shared_hbm)
    mm = nl.bfloat16 if q.dtype != nl.float32 else nl.float32
    nq, nk = S // T, Sk // T

    # dK and dV sum over the query heads of the group: fp32, in SBUF.
    dk_acc = [nl.zeros((T, D), nl.float32) for _ in range(nk)]
    dv_acc = [nl.zeros((T, D), nl.float32) for _ in range(nk)]
    for g in nl.sequential_range(group):
        h = kvh * group + g
        # Per query tile: q, q^T, dO, dO^T, -lse and D = rowsum(dO * O).
        q_rows, q_cols, do_rows, do_cols, neg_lse, delta = [], [], [], [], [], []
        for i in nl.affine_range(nq):
            rows = slice(i * T, (i + 1) * T)
            qt = nl.load(q[b, h, rows, :], dtype=mm)
            dot = nl.load(d_o[b, h, rows, :], dtype=mm)
            q_rows.append(qt)
            q_cols.append(transposed(qt, mm))
            do_rows.append(dot)
            do_cols.append(transposed(dot, mm))
            ot = nl.load(o[b, h, rows, :], dtype=nl.float32)
            delta.append(nl.sum(nl.multiply(ot, dot, dtype=nl.float32), axis=1, keepdims=True))
            lt = nl.load(lse[b, h, rows], dtype=nl.float32).reshape((T, 1))
            neg_lse.append(nl.negative(lt))
        dq_acc = [nl.zeros((T, D), nl.float32) for _ in range(nq)]
        for j in nl.sequential_range(nk):
            cols = slice(j * T, (j + 1) * T)
            kt = nl.load(k[b, kvh, cols, :], dtype=mm)
            k_cols = transposed(kt, mm)
            v_cols = transposed(nl.load(v[b, kvh, cols, :], dtype=mm), mm)
            dk_ps = nl.zeros((T, D), nl.float32, buffer=nl.psum)
            dv_ps = nl.zeros((T, D), nl.float32, buffer=nl.psum)
            for i in nl.affine_range(j if causal else 0, nq):
                s = matmul_to_psum(q_cols[i], k_cols)  # [T q, T k] raw scores
                p = nl.ndarray((T, T), dtype=nl.float32)
                nisa.activation(dst=p, op=nl.exp, data=s, bias=neg_lse[i], scale=scale)
                if causal and i == j:  # keep keys at or before the query (row >= col)
                    masked = nl.ndarray((T, T), dtype=nl.float32)
                    nisa.affine_select(
                        dst=masked,
                        pattern=[[-1, T]],
                        offset=0,
                        channel_multiplier=1,
                        on_true_tile=p,
                        on_false_value=0.0,
                        cmp_op=nl.greater_equal,
                    )
                    p = masked
                # P^T dO and dS^T Q accumulate in PSUM over the query tiles.
                nisa.nc_matmul(dst=dv_ps, stationary=nl.copy(p, dtype=mm), moving=do_rows[i])
                dp = matmul_to_psum(do_cols[i], v_cols)  # dO V^T: [T q, T k]
                ds = nl.multiply(p, nl.subtract(dp, delta[i]), dtype=mm)  # dS / scale
                nisa.nc_matmul(dst=dk_ps, stationary=ds, moving=q_rows[i])  # [T k, D]
                ds_t = transposed(ds, mm)
                dq_acc[i] = nl.add(dq_acc[i], matmul_to_psum(ds_t, kt))  # dS K: [T q, D]
            dk_acc[j] = nl.add(dk_acc[j], dk_ps)
            dv_acc[j] = nl.add(dv_acc[j], dv_ps)
        for i in nl.affine_range(nq):
            nl.store(
                dq[b, h, i * T : (i + 1) * T, :], value=nl.multiply(dq_acc[i], scale, dtype=q.dtype)
            )
    for j in nl.affine_range(nk):
        nl.store(
            dk[b, kvh, j * T : (j + 1) * T, :], value=nl.multiply(dk_acc[j], scale, dtype=k.dtype)
        )
        nl.store(dv[b, kvh, j * T : (j + 1) * T, :], value=nl.copy(dv_acc[j], dtype=v.dtype))
    return dq, dk, dv
