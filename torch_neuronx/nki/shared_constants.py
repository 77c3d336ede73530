"""Constant tensors a kernel asks for by value: ``nl.shared_identity_matrix``
and ``nl.shared_constant``.

- ``nl.shared_identity_matrix(n, dtype=nl.uint8)`` (NKI's page:
  https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/
  nki.language.shared_identity_matrix.html, 0.7/0.8: "Create an identity
  matrix in SBUF"; ``dst=`` writes it into a given tile) is an SBUF ``[n, n]``
  tile. The compiler reuses identity matrices of one dtype across the kernel,
  and so does this: one tile per (n, dtype) and kernel trace.
- ``nl.shared_constant(constant, dtype=None)`` (NKI's page:
  https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/
  nki.language.shared_constant.html, 0.8: "Create a tensor in shared HBM
  initialized with constant data", a NumPy array or the path of a ``.npy``
  file; ``dtype`` converts it) is an HBM tensor of the constant's shape,
  shared by every use of the same data and dtype in the kernel.

The simulator's programs have no initialised internal buffers, so the
constant is written by instructions: each block of up to 128 rows is an SBUF
tile set to its most common value (one memset), then every run of other
values that is constant or an integer arithmetic progression along a row is
a memset or an iota, and such runs that repeat down the rows with a constant
column shift and value step merge into one instruction (an identity matrix:
one memset of its diagonal). The tile is then copied to the HBM tensor by
DMA. Data without that structure would need one instruction per run: more
than ``MAX_INSTRUCTIONS`` of them is an NKIError "not supported yet" (the
simulator would need a constant buffer handed over with the program).

Cost. NKI publishes no figure for either: both are compile-time constants
(shared_constant's data is loaded into HBM when the model loads). Here the
identity costs two Vector memsets (max(64, n) and 64 cycles) once per kernel
and dtype; a shared_constant costs its memsets/iotas and one DMA per block of
rows at every launch: an over-estimate of NKI's zero.
"""

from __future__ import annotations

import math
import os

import numpy as np

from . import dtypes as _dt
from .indexing import Expr
from .trace_state import HBM, PMAX, SBUF, current, error, user_location
from .view import View

MAX_INSTRUCTIONS = 4096  # per constant
_EXACT_INT = 1 << 24  # immediates pass through fp32 on the engines
_BLOCK_BYTES = 16 * 1024  # SBUF bytes per partition of one staging tile


def _cache(t) -> dict:
    """The constants built so far, per physical core: the two cores of an
    LNC=2 launch run at the same time (their instructions are merged), so
    each builds and reads its own copy — a core never reads a constant whose
    build the other core's stream has not reached yet."""
    per_core = getattr(t, "_nki_shared_constants", None)
    if per_core is None:
        per_core = {}
        t._nki_shared_constants = per_core
    return per_core.setdefault(t.physical_core, {})


# nl.shared_identity_matrix ------------------------------------------------------
def shared_identity_matrix(n, dtype=_dt.uint8, dst=None, **kwargs) -> View:
    """An ``[n, n]`` identity matrix in SBUF (written into ``dst`` if given)."""
    loc = user_location()
    t = current()
    try:
        n = int(n)
    except (TypeError, ValueError):
        raise error(
            f"shared_identity_matrix: n must be an integer, got {n!r}", "shape", loc
        ) from None
    if n < 1:
        raise error(f"shared_identity_matrix: n must be positive, got {n}", "shape", loc)
    try:
        dtype = _dt.as_dtype(dtype)
    except TypeError as e:
        raise error(f"shared_identity_matrix: {e}", "dtype", loc) from None
    if dst is not None:
        if not isinstance(dst, View) or dst.buf.space == HBM:
            raise error("shared_identity_matrix: dst must be an SBUF or PSUM tile", "operand", loc)
        if dst.shape != (n, n):
            raise error(
                f"shared_identity_matrix: dst {list(dst.shape)} is not [{n}, {n}]", "shape", loc
            )
        dst.static_only("shared_identity_matrix dst", loc)
        _write_identity(dst, loc)
        return dst
    key = ("identity", n, dtype.name)
    cache = _cache(t)
    if key not in cache:
        tile = View.contiguous(t.new_buffer(SBUF, dtype, (n, n), "identity", loc))
        _write_identity(tile, loc)
        cache[key] = tile
    return cache[key]


def _write_identity(v: View, loc) -> None:
    t = current()
    v.verify(loc=loc)
    t.emit("memset", "vector", v, (), imm=(0.0,), loc=loc)
    n = v.shape[0]
    diag = View(v.buf, v.offset, (n, 1), (v.strides[0] + v.strides[1], 1))
    t.emit("memset", "vector", diag, (), imm=(1.0,), loc=loc)


# nl.shared_constant -------------------------------------------------------------
def shared_constant(constant, dtype=None, **kwargs) -> View:
    """An HBM tensor holding ``constant`` (a NumPy array, array-like or the
    path of a .npy file), converted to ``dtype`` if given."""
    loc = user_location()
    t = current()
    data = _as_array(constant, loc)
    if dtype is None:
        try:
            d = _dt.as_dtype(data.dtype)
        except TypeError:
            raise error(
                f"shared_constant: NKI has no element type {data.dtype}; give dtype= (e.g. "
                "nl.float32)",
                "dtype",
                loc,
            ) from None
    else:
        try:
            d = _dt.as_dtype(dtype)
        except TypeError as e:
            raise error(f"shared_constant: {e}", "dtype", loc) from None
    if not d.is_simulated:
        raise error(f"shared_constant: {d.name} data is not supported yet", "dtype", loc)
    typed = data.astype(_dt.numpy_dtype(d))
    values = typed.astype(np.float64)
    if not d.is_float and values.size and np.abs(values).max() > _EXACT_INT:
        raise error(
            f"shared_constant: {d.name} values beyond 2**24 are not supported yet (the "
            "simulator writes constants through the engines' fp32 datapath)",
            "dtype",
            loc,
        )
    shape = tuple(int(s) for s in data.shape) or (1,)
    key = ("constant", d.name, shape, typed.tobytes())
    cache = _cache(t)
    if key in cache:
        return cache[key]
    buf = t.new_buffer(HBM, d, shape, "shared_constant", loc, kind="scratch")
    rows = shape[0] if len(shape) > 1 else 1
    cols = math.prod(shape) // max(rows, 1)
    grid = values.reshape(rows, cols) if values.size else values.reshape(rows, 0)
    emitted = 0
    width = max(1, _BLOCK_BYTES // d.itemsize)
    for r0 in range(0, rows, PMAX):
        p = min(PMAX, rows - r0)
        for c0 in range(0, cols, width):
            w = min(width, cols - c0)
            tile = View.contiguous(t.new_buffer(SBUF, d, (p, w), "shared_constant", loc))
            n = _write_block(tile, grid[r0 : r0 + p, c0 : c0 + w], MAX_INSTRUCTIONS - emitted, loc)
            emitted += n
            if n < 0:
                raise error(
                    f"shared_constant: this {list(shape)} {d.name} constant has no compact "
                    f"structure (more than {MAX_INSTRUCTIONS} runs of values to write); "
                    "arbitrary constant data is not supported yet",
                    "not-supported",
                    loc,
                )
            hbm = View(buf, r0 * cols + c0, (p, w), (cols, 1))
            t.emit("copy", "dma", hbm, [tile], loc=loc)
    out = View.contiguous(buf)
    cache[key] = out
    return out


def _as_array(constant, loc) -> np.ndarray:
    if isinstance(constant, (str, os.PathLike)):
        try:
            return np.load(os.fspath(constant), allow_pickle=False)
        except (OSError, ValueError) as e:
            raise error(f"shared_constant: cannot read {constant!r}: {e}", "operand", loc) from None
    if isinstance(constant, View):
        raise error(
            "shared_constant takes data known when the kernel is traced (a NumPy array or "
            "a .npy path), not a kernel tensor",
            "operand",
            loc,
        )
    try:
        a = np.asarray(constant)
    except Exception:  # noqa: BLE001 (anything NumPy cannot take)
        a = None
    if a is None or a.dtype == object:
        raise error(
            f"shared_constant takes a NumPy array or the path of a .npy file, got "
            f"{type(constant).__name__}",
            "operand",
            loc,
        )
    return a


def _runs(row: np.ndarray, bits: np.ndarray, background) -> list:
    """(column, length, value, step) runs of a row's values other than the
    background: equal values (step 0) or integer progressions."""
    out, c, n = [], 0, len(row)
    while c < n:
        if bits[c] == background:
            c += 1
            continue
        v = row[c]
        step = 0.0
        if c + 2 < n and _is_int(v):
            d = row[c + 1] - v
            if d != 0 and _is_int(d) and row[c + 2] - row[c + 1] == d:
                step = d
        e = c + 1
        if step:
            while e < n and row[e] - row[e - 1] == step and abs(row[e]) <= _EXACT_INT:
                e += 1
        else:
            while e < n and bits[e] == bits[c]:
                e += 1
        out.append((c, e - c, float(v), float(step)))
        c = e
    return out


def _is_int(x) -> bool:
    return bool(np.isfinite(x)) and float(x) == int(x) and abs(x) <= _EXACT_INT


def _write_block(tile: View, block: np.ndarray, budget: int, loc) -> int:
    """Writes ``block`` (float64 values) into ``tile``; returns the number
    of instructions (-1 when more than ``budget`` would be needed)."""
    t = current()
    p, w = block.shape
    bits = block.view(np.int64)
    uniq, counts = np.unique(bits, return_counts=True)
    background = uniq[int(np.argmax(counts))]
    fill = float(np.int64(background).view(np.float64))
    # Chains of equal runs down the rows: [first row, column, value, length,
    # step, rows, column shift per row, value step per row].
    chains: list = []
    done: list = []
    for r in range(p):
        extended = []
        for c, n, v, step in _runs(block[r], bits[r], background):
            for k, ch in enumerate(chains):
                r0, c0, v0, n0, s0, m, dc, dv = ch
                if n0 != n or s0 != step or r0 + m != r:
                    continue
                ndc = c - (c0 + dc * (m - 1))
                ndv = v - (v0 + dv * (m - 1))
                if step == 0:  # a memset: one value
                    ok = _bits(v) == _bits(v0) and (m == 1 or ndc == dc)
                    ndv = 0.0
                else:  # an iota: an integer step down the rows
                    ok = _is_int(ndv) if m == 1 else (ndc == dc and ndv == dv)
                if ok:
                    chains.pop(k)
                    if m == 1:
                        dc, dv = ndc, ndv
                    extended.append([r0, c0, v0, n, step, m + 1, dc, dv])
                    break
            else:
                extended.append([r, c, v, n, step, 1, 0, 0.0])
        done += chains
        chains = extended
        if len(done) + len(chains) + 1 > budget:
            return -1
    done += chains
    t.emit("memset", "vector", tile, (), imm=(fill,), loc=loc)
    for r0, c0, v0, n, step, m, dc, dv in done:
        dst = View(tile.buf, tile.offset + r0 * w + c0, (m, n), (w + dc, 1))
        if step == 0:
            t.emit("memset", "vector", dst, (), imm=(v0,), loc=loc)
        else:
            e = Expr((m, n), int(v0), (int(dv), int(step)))
            t.emit("iota", "gpsimd", dst, [e], loc=loc)
    return 1 + len(done)


def _bits(x: float) -> int:
    return int(np.float64(x).view(np.int64))


__all__ = ["shared_constant", "shared_identity_matrix"]
