"""Tensor-engine steps the kernels share, in the destination-first ``nki.isa``
form: the engine writes PSUM, so each result gets a PSUM tile of its own."""

from __future__ import annotations

from .. import isa as nisa
from .. import language as nl


def matmul_to_psum(stationary, moving):
    """stationary[K, M]^T @ moving[K, N] into a new fp32 PSUM tile [M, N]."""
    out = nl.ndarray((stationary.shape[1], moving.shape[1]), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=out, stationary=stationary, moving=moving)
    return out


def transposed(x, dtype):
    """x [P, F] (both <= 128) transposed on the Tensor engine, as a new SBUF
    tile [F, P] of ``dtype``."""
    ps = nl.ndarray((x.shape[1], x.shape[0]), dtype=x.dtype, buffer=nl.psum)
    nisa.nc_transpose(dst=ps, data=x)
    return nl.copy(ps, dtype=dtype)
