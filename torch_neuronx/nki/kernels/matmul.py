"""Tiled matmul in NKI: C = A^T B with A^T (K, M) and B (K, N), 128 x 128
stationary tiles against 128 x 512 moving tiles, accumulating over K in
PSUM; the moving tiles of a row block stay in SBUF across the M loop."""

from __future__ import annotations

from .. import isa as nisa
from .. import language as nl
from ..kernel import jit


@jit
def tiled_matmul(lhsT, rhs):
    K, M = lhsT.shape
    K2, N = rhs.shape
    assert K == K2 and K % 128 == 0 and M % 128 == 0 and N % 512 == 0, (lhsT.shape, rhs.shape)
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for n in nl.affine_range(N // 512):
        rhs_tiles = []
        for k in nl.affine_range(K // 128):
            t = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=rhs[k * 128 : (k + 1) * 128, n * 512 : (n + 1) * 512])
            rhs_tiles.append(t)
        for m in nl.affine_range(M // 128):
            ps = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                lt = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lt, src=lhsT[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
                nisa.nc_matmul(dst=ps, stationary=lt, moving=rhs_tiles[k])
            sb = nl.ndarray((128, 512), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=sb, src=ps)
            nisa.dma_copy(dst=out[m * 128 : (m + 1) * 128, n * 512 : (n + 1) * 512], src=sb)
    return out
