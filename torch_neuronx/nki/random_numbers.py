"""Random numbers in NKI kernels: ``nl.rand``, ``nl.random_seed``,
``nl.dropout`` and ``nisa.dropout`` (destination first, and the original
form returning a new tile, ``legacy_dropout``, which ``neuronxcc.nki.isa``
exports under NKI's name).

The rules come from NKI's reference pages (awsdocs-neuron.readthedocs-
hosted.com, ``nki/api/generated/nki.language.rand.html``, ``...random_seed``,
``...language.dropout``, ``nki.isa.dropout``):

- ``rand(shape, dtype, buffer=nl.sbuf, name='')``: a new tensor of uniform
  values in [0, 1). A float type (uniform values in [0, 1) of an integer type
  would all be 0: an NKIError here); the values are multiples of 2^-b, b the
  type's significant bits (24 for fp32, 8 for bf16), so none rounds to 1. In
  HBM: made in SBUF, 128 rows at a time, and copied out.
- ``random_seed(seed)``: ``seed`` is a [1, 1] SBUF/PSUM tile of a 32-bit type
  (int32, uint32, float32; its 32 bits are the seed) read when the kernel
  runs; a Python integer is taken as that value too. The same seed gives the
  same values from the rand / dropout calls after it (NKI's example: seed 42,
  rand, seed 42 again, rand: equal tiles). A kernel that sets no seed draws
  from a fresh state on each launch (two launches differ, as on hardware).
- ``dropout``: each element zeroed with probability ``prob`` (a constant in
  [0, 1] or a ``(data.shape[0], 1)`` tile, one per partition; NKI's
  ``nl.dropout`` also takes a one-element tile for every partition), the
  others kept unchanged: no rescaling by 1 / (1 - prob), as NKI documents.
  Vector engine. Integer data: a float32 ``prob`` tile and an output of the
  data's type; float data: a ``prob`` tile of any float type, any output
  type. Data and output of rank at most 4.

Each is one simulator instruction (``runtime/nki``: Op::kRandomSeed,
kRandom, kDropout) drawing from the run's random stream, a counter-based
generator (SplitMix64's output function of the key and the position in the
stream), so the values do not depend on threads or on other launches.
Every rule a call can break is an NKIError at the kernel line.
"""

from __future__ import annotations

import math

from . import dtypes as _dt
from . import indexing as _indexing
from . import trace_state as _tr
from .trace_state import HBM, current, error, user_location
from .view import View

# The language's tile helpers (nl._emit, nl._new_tile, ...): language.py
# imports this module for nl.rand / nl.dropout, so it hands itself over when
# it loads instead (as to view.use_language) — no import cycle.
nl = None


def use_language(module) -> None:
    global nl
    nl = module


SEED_BITS = 32
MAX_DROPOUT_RANK = 4  # the partition dimension and three free dimensions


def _dtype(dtype, what: str, loc) -> _dt.DType:
    try:
        return _dt.as_dtype(dtype)
    except TypeError as e:
        raise error(f"{what}: {e}", "dtype", loc) from None


def _tile(x, what: str, name: str, loc) -> View:
    return nl._static_operand(x, what, name, loc)


# rand ----------------------------------------------------------------------------
def rand(shape, dtype=_dt.float32, buffer=None, name: str = "", *, mask=None, **kwargs) -> View:
    """A new tensor of ``shape`` and ``dtype`` in ``buffer`` (SBUF by
    default) holding uniform random values in [0, 1)."""
    loc = user_location()
    dtype = _dtype(dtype, "rand", loc)
    if not dtype.is_float:
        raise error(
            f"rand: dtype {dtype.name}: uniform values in [0, 1) need a float type "
            "(float32, bfloat16, float16, fp8)",
            "dtype",
            loc,
        )
    out = nl.ndarray(shape, dtype, buffer=buffer, name=name)
    if out.buf.space != HBM:
        nl._emit("rand", "vector", out, (), mask=mask, loc=loc)
        return out
    if mask is not None:
        raise error("rand: a mask applies to a tile in SBUF or PSUM, not HBM", "operand", loc)
    # HBM: made in SBUF a block of partitions at a time and copied out (the
    # stream's values in the tensor's row-major order all the same).
    rows = out.shape[0] if out.ndim else 1
    for r in range(0, rows, _tr.PMAX):
        n = min(_tr.PMAX, rows - r)
        block = nl.ndarray((n,) + tuple(out.shape[1:]), dtype)
        nl._emit("rand", "vector", block, (), loc=loc)
        nl._emit("copy", "dma", out[r : r + n] if out.ndim else out, [block], loc=loc)
    return out


# random_seed ---------------------------------------------------------------------
def random_seed(seed, *, mask=None, **kwargs) -> None:
    """Restarts the random values of the later rand / dropout calls from
    ``seed``: a [1, 1] tile of a 32-bit type read when the kernel runs (or a
    Python integer)."""
    loc = user_location()
    name = "random_seed"
    if seed is None:
        raise error(f"{name}: seed is required", "operand", loc)
    if mask is not None and _indexing.mask_box(mask, (1, 1), loc) is None:
        return
    if nl._is_scalar(seed):
        if isinstance(seed, bool) or not float(seed).is_integer():
            raise error(
                f"{name}: seed {seed!r} is not an integer; the seed is a 32-bit value",
                "operand",
                loc,
            )
        value = int(seed)
        if not -(2**31) <= value < 2**32:
            raise error(
                f"{name}: seed {value} does not fit in 32 bits (int32 or uint32)", "operand", loc
            )
        current().emit(
            "random_seed",
            "vector",
            None,
            (),
            flags=_tr.FLAG_OPERAND0_IMM,
            imm=(float(value & 0xFFFFFFFF),),
            loc=loc,
        )
        return
    v = _tile(seed, "seed", name, loc)
    if math.prod(v.shape) != 1 or v.ndim > 2:
        raise error(
            f"{name}: the seed is a tile of shape {list(v.shape)}; it must be [1, 1] "
            "(one 32-bit value)",
            "shape",
            loc,
        )
    if v.dtype.itemsize * 8 != SEED_BITS or v.dtype.code < 0:
        raise error(
            f"{name}: the seed tile is {v.dtype.name}; it must hold a 32-bit value "
            "(int32, uint32 or float32)",
            "dtype",
            loc,
        )
    current().emit("random_seed", "vector", None, [v], loc=loc)


# dropout -------------------------------------------------------------------------
def _probability(prob, data: View, name: str, single_ok: bool, loc):
    """(flags, imm, tile): a constant probability as an immediate, or a tile
    of one per partition broadcast along data's free dims."""
    if prob is None:
        raise error(f"{name}: prob is required", "operand", loc)
    if nl._is_scalar(prob):
        p = float(prob)
        if isinstance(prob, bool) or not 0.0 <= p <= 1.0:
            raise error(f"{name}: prob {prob!r} is not a probability in [0, 1]", "operand", loc)
        return _tr.FLAG_OPERAND0_IMM, p, None
    if not isinstance(prob, View):
        raise error(
            f"{name}: prob must be a float constant or a tile of shape (data.shape[0], 1), "
            f"got {type(prob).__name__}",
            "operand",
            loc,
        )
    t = _tile(prob, "prob", name, loc)
    parts = data.shape[0] if data.ndim else 1
    per_partition = t.ndim in (1, 2) and t.shape[0] == parts and math.prod(t.shape[1:]) == 1
    single = single_ok and math.prod(t.shape) == 1 and t.ndim <= 2
    if not (per_partition or single):
        also = " or a tile of one element" if single_ok else ""
        raise error(
            f"{name}: prob is a tile of shape {list(t.shape)}; it must be (data.shape[0], 1) "
            f"= {[parts, 1]}, one probability per partition{also}",
            "shape",
            loc,
        )
    if not t.dtype.is_float:
        raise error(f"{name}: prob is {t.dtype.name}; it must be a float type", "dtype", loc)
    if not data.dtype.is_float and t.dtype != _dt.float32:
        raise error(
            f"{name}: prob is {t.dtype.name}; with {data.dtype.name} data it must be float32",
            "dtype",
            loc,
        )
    if t.ndim == 1:
        t = t.with_shape((t.shape[0], 1), (t.strides[0], 0))
    return 0, 0.0, nl._bcast(t, data.shape)


def _dropout(dst, data, prob, mask, loc, single_ok=False, name="dropout") -> None:
    data = _tile(data, "data", name, loc)
    dst = _tile(dst, "dst", name, loc)
    for what, v in (("data", data), ("dst", dst)):
        if v.ndim > MAX_DROPOUT_RANK:
            raise error(
                f"{name}: {what} {list(v.shape)} has rank {v.ndim}; at most {MAX_DROPOUT_RANK} "
                f"(the partition dimension and {MAX_DROPOUT_RANK - 1} free dimensions)",
                "shape",
                loc,
            )
    if dst.shape != data.shape:
        raise error(
            f"{name}: dst {list(dst.shape)} and data {list(data.shape)} differ in shape; "
            "the output has the data's shape",
            "shape",
            loc,
        )
    if not data.dtype.is_float and dst.dtype != data.dtype:
        raise error(
            f"{name}: the output is {dst.dtype.name}; with {data.dtype.name} data it must be "
            f"{data.dtype.name} too",
            "dtype",
            loc,
        )
    flags, p, tile = _probability(prob, data, name, single_ok, loc)
    srcs = [data] if tile is None else [data, tile]
    nl._emit("dropout", "vector", dst, srcs, mask=mask, flags=flags, imm=(p,), loc=loc)


def _new_output(data, dtype, name, loc) -> tuple[View, View]:
    x = _tile(data, "data", name, loc)
    out_dtype = x.dtype if dtype is None else _dtype(dtype, name, loc)
    return x, nl._new_tile(x.shape, out_dtype, loc)


def dropout(dst=None, data=None, prob=None, name=None, *, mask=None, dtype=None, **kwargs):
    """``nisa.dropout(dst, data, prob)``: ``dst`` = ``data`` with each element
    zeroed with probability ``prob`` (a constant or a (P, 1) tile), the others
    unchanged. Without ``dst`` (or called as ``dropout(data, prob)``), the
    original form: a new tile is returned."""
    loc = user_location()
    if dst is not None and prob is None and data is not None and not isinstance(data, View):
        return legacy_dropout(dst, data, mask=mask, dtype=dtype)  # dropout(data, prob)
    if dst is None:
        return legacy_dropout(data, prob, mask=mask, dtype=dtype)
    _dropout(dst, data, prob, mask, loc)
    return None


def legacy_dropout(data, prob, *, mask=None, dtype=None, **kwargs) -> View:
    """``neuronxcc.nki.isa.dropout(data, prob, dtype=...)``: a new tile of
    ``dtype`` (default the data's) with elements of ``data`` zeroed."""
    loc = user_location()
    x, out = _new_output(data, dtype, "dropout", loc)
    _dropout(out, x, prob, mask, loc)
    return out


def language_dropout(x, rate, dtype=None, *, mask=None, **kwargs) -> View:
    """``nl.dropout(x, rate, dtype=None)``: a new tile of ``x`` with each
    element zeroed with probability ``rate`` (a constant, a (P, 1) tile or a
    one-element tile)."""
    loc = user_location()
    x, out = _new_output(x, dtype, "nl.dropout", loc)
    _dropout(out, x, rate, mask, loc, single_ok=True, name="nl.dropout")
    return out


__all__ = ["rand", "random_seed", "dropout", "legacy_dropout", "language_dropout"]
