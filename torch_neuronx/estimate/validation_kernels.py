"""The NKI kernels of the validation table (torch_neuronx.estimate.validation):
the published tutorial kernels, written here with the tutorials' structure
(the same loops, loads and instructions, so the same work reaches the cost
model) in the older tile-returning ``neuronxcc.nki`` form the tutorials use.

- The matrix-multiplication tutorial's four kernels (the same four as
  benchmarks/nki_kernels.py).
- The fused-Mamba tutorial's three kernels (selective scan of a Mamba-v1
  layer): v1 states outside the channel tiles, v2 channel tiles outside the
  states (delta/u loaded once per tile), v3 v2 with the sequence tiled by 512.
- An RMSNorm + fp8 quantization kernel with the NKI library's RMSNorm-Quant
  design (activation_reduce for the sum of squares, gamma broadcast on the
  Tensor engine, abs-max quantization, data and scale packed in one row).

Importing this module imports the NKI front end only (no planning machinery).
"""

from __future__ import annotations

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np

# --------------------------------------------------------------------------
# NKI matrix-multiplication tutorial: C = lhsT.T @ rhs, bf16, K x M and K x N


@nki.jit
def mm_tiled(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            res_psum = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                lhsT_tile = nl.load(lhsT[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
                rhs_tile = nl.load(rhs[k * 128 : (k + 1) * 128, n * 512 : (n + 1) * 512])
                res_psum += nl.matmul(lhsT_tile, rhs_tile, transpose_x=True)
            nl.store(
                result[m * 128 : (m + 1) * 128, n * 512 : (n + 1) * 512],
                value=nl.copy(res_psum, dtype=result.dtype),
            )
    return result


@nki.jit
def mm_hoist_load(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        lhsT_tiles = nl.ndarray((K // 128, nl.par_dim(128), 128), dtype=lhsT.dtype)
        for k in nl.affine_range(K // 128):
            lhsT_tiles[k] = nl.load(lhsT[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
        for n in nl.affine_range(N // 512):
            rhs_tiles = nl.ndarray((K // 128, nl.par_dim(128), 512), dtype=rhs.dtype)
            for k in nl.affine_range(K // 128):
                rhs_tiles[k] = nl.load(rhs[k * 128 : (k + 1) * 128, n * 512 : (n + 1) * 512])
            res_psum = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                res_psum += nl.matmul(lhsT_tiles[k], rhs_tiles[k], transpose_x=True)
            nl.store(
                result[m * 128 : (m + 1) * 128, n * 512 : (n + 1) * 512],
                value=nl.copy(res_psum, dtype=result.dtype),
            )
    return result


@nki.jit
def mm_block_free_dimension(lhsT, rhs, bm=2, bn=2):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // (128 * bm)):
        lhsT_tiles = nl.ndarray((K // 128, nl.par_dim(128), 128 * bm), dtype=lhsT.dtype)
        for k in nl.affine_range(K // 128):
            lhsT_tiles[k] = nl.load(
                lhsT[k * 128 : (k + 1) * 128, m * 128 * bm : (m + 1) * 128 * bm]
            )
        for n in nl.affine_range(N // (512 * bn)):
            rhs_tiles = nl.ndarray((K // 128, nl.par_dim(128), 512 * bn), dtype=rhs.dtype)
            for k in nl.affine_range(K // 128):
                rhs_tiles[k] = nl.load(
                    rhs[k * 128 : (k + 1) * 128, n * 512 * bn : (n + 1) * 512 * bn]
                )
            for i in nl.affine_range(bm):
                for j in nl.affine_range(bn):
                    res_psum = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(K // 128):
                        res_psum += nl.matmul(
                            lhsT_tiles[k, :, i * 128 : (i + 1) * 128],
                            rhs_tiles[k, :, j * 512 : (j + 1) * 512],
                            transpose_x=True,
                        )
                    r0 = (m * bm + i) * 128
                    c0 = (n * bn + j) * 512
                    nl.store(
                        result[r0 : r0 + 128, c0 : c0 + 512],
                        value=nl.copy(res_psum, dtype=result.dtype),
                    )
    return result


@nki.jit
def mm_fully_optimized(lhsT, rhs, bm=16, bn=2, bk=8):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    BM, BN, BK = 128 * bm, 512 * bn, 128 * bk
    for n in nl.affine_range(N // BN):
        # fp32 accumulators of a column block, in SBUF across the K blocks.
        acc = nl.zeros((M // 128, nl.par_dim(128), BN), dtype=nl.float32)
        for kb in nl.sequential_range(K // BK):
            rhs_tiles = nl.ndarray((bk, nl.par_dim(128), BN), dtype=rhs.dtype)
            for k in nl.affine_range(bk):
                k0 = kb * BK + k * 128
                rhs_tiles[k] = nl.load(rhs[k0 : k0 + 128, n * BN : (n + 1) * BN])
            for m in nl.affine_range(M // BM):
                lhsT_tiles = nl.ndarray((bk, nl.par_dim(128), BM), dtype=lhsT.dtype)
                for k in nl.affine_range(bk):
                    k0 = kb * BK + k * 128
                    lhsT_tiles[k] = nl.load(lhsT[k0 : k0 + 128, m * BM : (m + 1) * BM])
                for i in nl.affine_range(bm):
                    for j in nl.affine_range(bn):
                        res = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
                        for k in nl.affine_range(bk):
                            res += nl.matmul(
                                lhsT_tiles[k, :, i * 128 : (i + 1) * 128],
                                rhs_tiles[k, :, j * 512 : (j + 1) * 512],
                                transpose_x=True,
                            )
                        cols = slice(j * 512, (j + 1) * 512)
                        acc[m * bm + i, :, cols] = nl.add(acc[m * bm + i, :, cols], res)
        for mt in nl.affine_range(M // 128):
            nl.store(
                result[mt * 128 : (mt + 1) * 128, n * BN : (n + 1) * BN],
                value=nl.copy(acc[mt], dtype=result.dtype),
            )
    return result


MATMUL_TUTORIAL = {
    "tiled": mm_tiled,
    "hoist_load": mm_hoist_load,
    "block_free_dimension": mm_block_free_dimension,
    "fully_optimized": mm_fully_optimized,
}

# --------------------------------------------------------------------------
# NKI fused-Mamba tutorial. Shapes: delta, u (batch, channels, seq);
# A (channels, state); B, C (batch, state, seq); fp32. Output (batch,
# channels, seq) = sum over states of C * scan(exp(delta * A), delta * u * B).


def _scan_one_state(d, uu, a, b_hbm, c_hbm, width, initial):
    """One state over one [128, width] tile of channels, in the tutorial's
    instruction order: exp(delta * A) on the Scalar engine (the scale folded
    into the activation), load B, delta * u * B and the scan on the Vector
    engine, load C. Returns the scan and C broadcast to the tile (the
    caller multiplies them where the tutorial puts the product)."""
    decay = nisa.activation(op=nl.exp, data=d, scale=a)
    b_row = nl.load(b_hbm)
    du = nisa.tensor_tensor(d, uu, op=nl.multiply)
    dbu = nisa.tensor_tensor(du, b_row.broadcast_to((128, width)), op=nl.multiply)
    h = nisa.tensor_tensor_scan(decay, dbu, initial=initial, op0=np.multiply, op1=np.add)
    c_row = nl.load(c_hbm)
    return h, c_row.broadcast_to((128, width))


@nki.jit
def mamba_v1(delta, u, A, B, C):
    nb, nch, ns = delta.shape
    n_state = A.shape[1]
    n_tiles = nch // 128
    out = nl.ndarray((nb, nch, ns), dtype=delta.dtype, buffer=nl.shared_hbm)
    for b in nl.affine_range(nb):
        total = nl.zeros((n_tiles, nl.par_dim(128), ns), dtype=delta.dtype)
        for s in nl.affine_range(n_state):
            for t in nl.affine_range(n_tiles):
                ch = slice(t * 128, (t + 1) * 128)
                d = nl.load(delta[b, ch, 0:ns])
                a = nl.load(A[ch, s])
                uu = nl.load(u[b, ch, 0:ns])
                h, c_b = _scan_one_state(
                    d, uu, a, B[b, s : s + 1, 0:ns], C[b, s : s + 1, 0:ns], ns, 0
                )
                total[t, 0:128, 0:ns] += nisa.tensor_tensor(h, c_b, op=nl.multiply)
        for t in nl.affine_range(n_tiles):
            nl.store(out[b, t * 128 : (t + 1) * 128, 0:ns], total[t, 0:128, 0:ns])
    return out


@nki.jit
def mamba_v2(delta, u, A, B, C):
    nb, nch, ns = delta.shape
    n_state = A.shape[1]
    out = nl.ndarray((nb, nch, ns), dtype=delta.dtype, buffer=nl.shared_hbm)
    for b in nl.affine_range(nb):
        for t in nl.affine_range(nch // 128):
            ch = slice(t * 128, (t + 1) * 128)
            total = nl.zeros((nl.par_dim(128), ns), dtype=delta.dtype)
            d = nl.load(delta[b, ch, 0:ns])
            uu = nl.load(u[b, ch, 0:ns])
            for s in nl.affine_range(n_state):
                a = nl.load(A[ch, s])
                h, c_b = _scan_one_state(
                    d, uu, a, B[b, s : s + 1, 0:ns], C[b, s : s + 1, 0:ns], ns, 0
                )
                total[0:128, 0:ns] += nisa.tensor_tensor(h, c_b, op=nl.multiply)
            nl.store(out[b, ch, 0:ns], total[0:128, 0:ns])
    return out


@nki.jit
def mamba_v3(delta, u, A, B, C, seq_tile=512):
    nb, nch, ns = delta.shape
    n_state = A.shape[1]
    out = nl.ndarray((nb, nch, ns), dtype=delta.dtype, buffer=nl.shared_hbm)
    for b in nl.affine_range(nb):
        for t in nl.affine_range(nch // 128):
            ch = slice(t * 128, (t + 1) * 128)
            total = nl.zeros((nl.par_dim(128), ns), dtype=delta.dtype)
            d = nl.load(delta[b, ch, 0:ns])
            uu = nl.load(u[b, ch, 0:ns])
            for s in nl.affine_range(n_state):
                a = nl.load(A[ch, s])
                carry = nl.zeros((128, 1), dtype=d.dtype)
                for j in nl.static_range(ns // seq_tile):
                    cols = slice(j * seq_tile, (j + 1) * seq_tile)
                    h, c_b = _scan_one_state(
                        d[0:128, cols],
                        uu[0:128, cols],
                        a,
                        B[b, s : s + 1, cols],
                        C[b, s : s + 1, cols],
                        seq_tile,
                        carry,
                    )
                    carry[...] = h[0:128, seq_tile - 1]
                    # the product goes to PSUM before it is accumulated
                    y = nl.ndarray((128, seq_tile), dtype=delta.dtype, buffer=nl.psum)
                    y[...] = nisa.tensor_tensor(h, c_b, op=nl.multiply)
                    total[0:128, cols] += y
            nl.store(out[b, ch, 0:ns], total[0:128, 0:ns])
    return out


MAMBA_TUTORIAL = {"v1": mamba_v1, "v2": mamba_v2, "v3": mamba_v3}

# --------------------------------------------------------------------------
# RMSNorm + fp8 quantization in the NKI library's RMSNorm-Quant design.
# x (rows, H) bf16, gamma (1, H); outputs: the fp8 data (rows, H) and the
# fp32 dequantization scale of each row (rows, 1) (the library packs the two
# into one tensor: the same bytes stored, in one DMA per tile instead of two).

_FP8_MAX = 240.0  # the library's clamp for IEEE-style float8_e4m3


@nki.jit
def rmsnorm_quant(x, gamma, eps=1e-6):
    rows, H = x.shape
    # float8_e4m3fn, not the library's float8_e4m3: this kernel returns a torch
    # tensor and torch has only e4m3fn; values clamped to 240 fit both alike.
    out = nl.ndarray((rows, H), dtype=nl.float8_e4m3fn, buffer=nl.shared_hbm)
    scales = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    g = nl.load(gamma)  # [1, H]
    ones = nl.full((1, 128), 1.0, dtype=x.dtype)
    for r in nl.affine_range(rows // 128):
        t = nl.load(x[r * 128 : (r + 1) * 128, 0:H])
        # sum of squares on the Scalar engine, reduced in the same instruction
        sq = nl.ndarray((128, 1), dtype=nl.float32)
        _ = nisa.activation_reduce(op=nl.square, data=t, reduce_op=nl.add, reduce_res=sq)
        inv_rms = nisa.activation(op=nl.rsqrt, data=sq, scale=1.0 / H, bias=eps)
        normed = nl.ndarray((128, H), dtype=nl.float32)
        for c in nl.affine_range(H // 512):
            cols = slice(c * 512, (c + 1) * 512)
            # gamma broadcast to 128 rows on the Tensor engine (ones x gamma)
            g_b = nisa.nc_matmul(ones, g[0:1, cols])
            normed[0:128, cols] = nisa.scalar_tensor_tensor(
                data=t[0:128, cols],
                op0=nl.multiply,
                operand0=inv_rms,
                op1=nl.multiply,
                operand1=g_b,
            )
        absmax = nisa.tensor_reduce(op=nl.maximum, data=nl.abs(normed), axis=(1,))
        dequant = nisa.activation(op=nl.copy, data=absmax, scale=1.0 / _FP8_MAX)
        quant = nl.reciprocal(dequant)
        q = nisa.tensor_scalar(normed, op0=nl.multiply, operand0=quant, dtype=nl.float8_e4m3fn)
        nl.store(out[r * 128 : (r + 1) * 128, 0:H], value=q)
        nl.store(scales[r * 128 : (r + 1) * 128, 0:1], value=dequant)
    return out, scales
