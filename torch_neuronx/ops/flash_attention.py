"""``aten::_flash_attention_forward`` / ``_flash_attention_backward`` on neuron.

They are CUDA-only in ATen (no CPU kernel), and
``torch.nn.attention.varlen.varlen_attn`` — packed variable-length attention,
which TorchNeuron 2.34 runs on Neuron — calls them on every device but CUDA
with cuDNN. Here they compute what FlashAttention computes, as device ops
composed of ATen ops:

- dense ``[B, S, H, D]`` operands, or packed ``[T, H, D]`` ones with
  ``cum_seq_q`` / ``cum_seq_k`` (sequence i is rows ``cum[i]:cum[i+1]``);
- ``is_causal`` aligned bottom-right (query row r of a sequence of ``Lq``
  rows sees key columns up to ``r + Lk - Lq``, FlashAttention 2's rule), a
  sliding window ``window_size_left/right`` on the same diagonal, grouped-query
  heads (fewer K/V heads), ``scale``;
- the log-sum-exp FlashAttention returns (``[B, H, S]`` dense, ``[H, T]``
  packed; ``-inf`` and a zero output for a row that sees no key), and a backward
  from it (the probabilities recomputed, as FlashAttention's backward does).

Scores are materialised per call (``H x Tq x Tk`` floats): exact and simple,
not the tiled kernel's memory. Dropout, ``seqused_k``, ``block_table`` (paged
KV), ``alibi_slopes`` and ``num_splits`` are refused with a clear error.
"""

from __future__ import annotations

import math

import torch

_lib = None


def _segments(cum: torch.Tensor | None, total: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of a packed operand: its sequence index and its position in it."""
    rows = torch.arange(total, device=device)
    if cum is None:
        return torch.zeros_like(rows), rows
    cum = cum.to(device=device, dtype=torch.long)
    seg = torch.bucketize(rows, cum[1:], right=True)
    return seg, rows - cum[seg]


def _lengths(cum: torch.Tensor, seg: torch.Tensor) -> torch.Tensor:
    cum = cum.to(device=seg.device, dtype=torch.long)
    return (cum[1:] - cum[:-1])[seg]


def _visible(
    q_seg, q_pos, q_len, q_klen, k_seg, k_pos, is_causal: bool, left: int, right: int
) -> torch.Tensor:
    """[Tq, Tk]: which keys each query row attends to (``q_len``/``q_klen``: the
    query and key lengths of each query row's sequence)."""
    same = q_seg[:, None] == k_seg[None, :]
    # FlashAttention's diagonal: query row r lines up with key r + (Lk - Lq).
    diag = (q_pos + (q_klen - q_len))[:, None]
    k = k_pos[None, :]
    if is_causal:
        right = 0 if right < 0 else min(right, 0)
    ok = same
    if right >= 0:
        ok = ok & (k <= diag + right)
    if left >= 0:
        ok = ok & (k >= diag - left)
    return ok


def _check_unsupported(
    dropout_p, seqused_k=None, alibi_slopes=None, block_table=None, num_splits=None
):
    for value, what in (
        (seqused_k, "seqused_k"),
        (alibi_slopes, "alibi_slopes"),
        (block_table, "block_table (paged KV)"),
    ):
        if value is not None:
            raise NotImplementedError(
                f"_flash_attention_forward on neuron: {what} is not supported"
            )
    if num_splits not in (None, 0, 1):
        raise NotImplementedError("_flash_attention_forward on neuron: num_splits is not supported")
    if dropout_p != 0.0:
        raise NotImplementedError(
            "_flash_attention_forward on neuron: dropout is not supported "
            "(scaled_dot_product_attention with dropout_p runs it)"
        )


def _layout(query, key, value, cum_q, cum_k):
    """Operands as [Tq, Hq, D] / [Tk, Hk, D] plus the row bookkeeping."""
    packed = cum_q is not None
    if packed:
        if query.dim() != 3 or key.dim() != 3 or value.dim() != 3:
            raise RuntimeError(
                "_flash_attention_forward: with cum_seq_q, query/key/value are packed "
                f"[total, heads, head_dim], got {tuple(query.shape)}, {tuple(key.shape)}, "
                f"{tuple(value.shape)}"
            )
        if cum_k is None:
            raise RuntimeError("_flash_attention_forward: cum_seq_q needs cum_seq_k")
        if cum_q.numel() != cum_k.numel():
            raise RuntimeError(
                "_flash_attention_forward: cum_seq_q and cum_seq_k name different numbers "
                f"of sequences ({cum_q.numel() - 1} and {cum_k.numel() - 1})"
            )
        return query, key, value, cum_q, cum_k, None
    if query.dim() != 4:
        raise RuntimeError(
            "_flash_attention_forward: expected [batch, seq, heads, head_dim], got "
            f"{tuple(query.shape)}"
        )
    b, sq, sk = query.shape[0], query.shape[1], key.shape[1]
    dev = query.device
    cq = torch.arange(0, (b + 1) * sq, sq, device=dev, dtype=torch.int32)
    ck = torch.arange(0, (b + 1) * sk, sk, device=dev, dtype=torch.int32)
    flat = lambda t: t.reshape(-1, t.shape[2], t.shape[3])  # noqa: E731
    return flat(query), flat(key), flat(value), cq, ck, (b, sq)


def _probabilities(q, k, cum_q, cum_k, is_causal, scale, left, right):
    """Scores [Hq, Tq, Tk] (masked to -inf), the visibility mask, the scale."""
    tq, hq, d = q.shape
    hk = k.shape[1]
    if hq % hk:
        raise RuntimeError(
            f"_flash_attention_forward: query heads ({hq}) must be a multiple of key heads ({hk})"
        )
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    q_seg, q_pos = _segments(cum_q, tq, q.device)
    k_seg, k_pos = _segments(cum_k, k.shape[0], q.device)
    ok = _visible(
        q_seg,
        q_pos,
        _lengths(cum_q, q_seg),
        _lengths(cum_k, q_seg),
        k_seg,
        k_pos,
        is_causal,
        -1 if left is None else int(left),
        -1 if right is None else int(right),
    )
    kk = k.float().repeat_interleave(hq // hk, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.float(), kk) * scale
    return s.masked_fill(~ok, float("-inf")), ok, scale


def flash_attention_forward(
    query,
    key,
    value,
    cum_seq_q,
    cum_seq_k,
    max_q,
    max_k,
    dropout_p,
    is_causal,
    return_debug_mask,
    *,
    scale=None,
    window_size_left=None,
    window_size_right=None,
    seqused_k=None,
    alibi_slopes=None,
    block_table=None,
    num_splits=None,
):
    _check_unsupported(dropout_p, seqused_k, alibi_slopes, block_table, num_splits)
    q, k, v, cq, ck, dense = _layout(query, key, value, cum_seq_q, cum_seq_k)
    s, _, _ = _probabilities(q, k, cq, ck, is_causal, scale, window_size_left, window_size_right)
    lse = torch.logsumexp(s, dim=-1)  # [Hq, Tq]; -inf where no key is visible
    p = torch.exp(s - lse.masked_fill(torch.isinf(lse), 0.0)[..., None])
    hq, hk = q.shape[1], k.shape[1]
    vv = v.float().repeat_interleave(hq // hk, dim=1)
    # Contiguous, as the op's fake kernel (and FlashAttention) lays it out.
    out = torch.einsum("hqk,khd->qhd", p, vv).to(query.dtype).contiguous()
    if dense is not None:
        b, sq = dense
        out = out.reshape(b, sq, hq, -1)
        lse = lse.reshape(hq, b, sq).permute(1, 0, 2).contiguous()
    rng_state = torch.zeros(2, dtype=torch.uint64, device=query.device)
    unused = torch.empty(0, device=query.device)
    debug = torch.empty(0, dtype=query.dtype, device=query.device)
    return out, lse, rng_state, unused, debug


def flash_attention_backward(
    grad_out,
    query,
    key,
    value,
    out,
    logsumexp,
    cum_seq_q,
    cum_seq_k,
    max_q,
    max_k,
    dropout_p,
    is_causal,
    rng_state,
    unused,
    *,
    scale=None,
    window_size_left=None,
    window_size_right=None,
):
    _check_unsupported(dropout_p)
    cq_in = cum_seq_q if cum_seq_q is not None and cum_seq_q.numel() else None
    ck_in = cum_seq_k if cum_seq_k is not None and cum_seq_k.numel() else None
    q, k, v, cq, ck, dense = _layout(query, key, value, cq_in, ck_in)
    go = grad_out.reshape(q.shape[0], q.shape[1], -1).float()
    o = out.reshape(q.shape[0], q.shape[1], -1).float()
    lse = logsumexp
    if dense is not None:  # [B, H, S] -> [H, B*S]
        lse = lse.permute(1, 0, 2).reshape(q.shape[1], -1)
    s, _, scale = _probabilities(
        q, k, cq, ck, is_causal, scale, window_size_left, window_size_right
    )
    p = torch.exp(s - lse.float().masked_fill(torch.isinf(lse), 0.0)[..., None])
    hq, hk = q.shape[1], k.shape[1]
    group = hq // hk
    vv = v.float().repeat_interleave(group, dim=1)
    kk = k.float().repeat_interleave(group, dim=1)
    dv = torch.einsum("hqk,qhd->khd", p, go)
    dp = torch.einsum("qhd,khd->hqk", go, vv)
    delta = (go * o).sum(-1).transpose(0, 1)  # [H, Tq]
    ds = p * (dp - delta[..., None]) * scale
    dq = torch.einsum("hqk,khd->qhd", ds, kk)
    dk = torch.einsum("hqk,qhd->khd", ds, q.float())
    if group > 1:  # the query heads sharing a K/V head add their gradients
        dk = dk.reshape(dk.shape[0], hk, group, -1).sum(2)
        dv = dv.reshape(dv.shape[0], hk, group, -1).sum(2)
    return (
        dq.to(query.dtype).reshape(query.shape).contiguous(),
        dk.to(key.dtype).reshape(key.shape).contiguous(),
        dv.to(value.dtype).reshape(value.shape).contiguous(),
    )


def register() -> None:
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")
    _lib.impl("_flash_attention_forward", flash_attention_forward, "PrivateUse1")
    _lib.impl("_flash_attention_backward", flash_attention_backward, "PrivateUse1")
