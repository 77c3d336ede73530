"""The search instructions of ``nki.isa``: ``max8``, ``nc_find_index8`` and
``nc_match_replace8`` (Vector engine) and ``nonzero_with_count`` (GpSimd), in
the current destination-first form (``nisa.max8(dst=..., src=...)``) and in
the original form that returns a new tile (``legacy_max8`` etc., which
``neuronxcc.nki.isa`` exports under NKI's names).

Each is one simulator instruction (``runtime/nki``: Op::kMax8,
kFindIndex8, kMatchReplace8, kNonzeroWithCount) working on one partition at
a time over its free elements flattened row-major, in fp32. The rules come
from NKI's ISA reference pages (awsdocs-neuron.readthedocs-hosted.com,
``nki/api/generated/nki.isa.<name>.html``):

- ``max8``: the 8 largest values of each partition, descending (duplicates
  kept), converted to dst's type; 8 to 16,384 elements per partition, source
  rank at most 5, dst 8 elements per partition.
- ``nc_find_index8``: the position of each of 8 values per partition in the
  data; 8 to 16,384 data elements per partition; dst uint16 or uint32 (the
  original form's default uint32). Equal values take successive matching
  positions in ascending order; a value not found gets all ones (0xFFFFFFFF /
  0xFFFF), as the pages of NKI 2.32 and later state.
- ``nc_match_replace8``: the data with the positions of the 8 values set to
  ``imm``; optionally their positions into ``dst_idx``. Values are matched in
  the order 7..0 (equal values take successive positions, descending across
  the value slots: NKI's example, data [1, 2, 3, 4, 8 x 7] and vals
  [3, 8 x 7] give [2, 10, 9, ..., 4]); at most 16,384 elements per
  partition. The pages give ``dst_idx`` no type; it takes nc_find_index8's
  (uint16 or uint32), and a value not found gets all ones there too.
- ``nonzero_with_count`` (NeuronCore-v3+): for partitions 0, 16, ..., 112
  (each GpSimd core's first) the positions plus ``index_offset`` of the
  nonzero elements, then ``padding_val``, then their count; dst has one more
  element per partition than src; src float32 or int32 in SBUF, dst int32 in
  SBUF; the other partitions of dst are not written.

Every rule a call can break is an NKIError at the kernel line.
"""

from __future__ import annotations

import math

import numpy as np

from . import dtypes as _dt
from . import indexing as _indexing
from . import language as nl
from .trace_state import PSUM, SBUF, current, error, user_location
from .view import View

SEARCH_VALUES = 8  # values per partition of the three Vector instructions
MAX_SEARCH_ELEMENTS = 16384  # elements per partition they read (2^14)
MAX_DATA_RANK = 5  # partition dim + 4 free dims
MAX_VALS_RANK = 3
MAX_DST_RANK = 3
INDEX_DTYPES = (_dt.uint16, _dt.uint32)
NONZERO_SRC_DTYPES = (_dt.float32, _dt.int32)
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def _free(v: View) -> int:
    return math.prod(v.shape[1:]) if v.ndim > 1 else 1


def _tile(x, what: str, name: str, loc) -> View:
    return nl._static_operand(x, what, name, loc)


def _rank(v: View, limit: int, what: str, name: str, loc) -> None:
    if v.ndim > limit:
        raise error(
            f"{name}: {what} {list(v.shape)} has rank {v.ndim}; at most {limit} "
            f"(the partition dimension and {limit - 1} free dimensions)",
            "shape",
            loc,
        )


def _same_partitions(name: str, loc, **views) -> None:
    parts = {what: v.shape[0] for what, v in views.items() if v is not None}
    if len(set(parts.values())) > 1:
        listed = ", ".join(f"{what} {p}" for what, p in parts.items())
        raise error(
            f"{name}: the operands differ in partitions ({listed}); they must have the same "
            "partition dimension",
            "shape",
            loc,
        )


def _elements(v: View, lo: int, hi: int, what: str, name: str, loc) -> None:
    n = _free(v)
    if not lo <= n <= hi:
        bound = f"exactly {lo}" if lo == hi else f"between {lo} and {hi:,}"
        raise error(
            f"{name}: {what} {list(v.shape)} has {n} elements per partition; it must have {bound}",
            "search-limit" if lo != hi else "shape",
            loc,
        )


def _index_dtype(v: View, what: str, name: str, loc) -> None:
    if v.dtype not in INDEX_DTYPES:
        raise error(
            f"{name}: {what} is {v.dtype.name}; the indices are uint16 or uint32",
            "dtype",
            loc,
        )


def _masked(mask, data: View, others, loc):
    """A mask (the original form's) restricts the data it reads to the box it
    keeps. ``others``: (view, elementwise) pairs; an element-wise view (the
    replaced output) takes the same box, the others the partitions it keeps.
    Returns None for data when the mask keeps nothing."""
    views = [v for v, _ in others]
    if mask is None:
        return data, views
    box = _indexing.mask_box(mask, data.shape, loc)
    if box is None:
        return None, views
    lo, hi = box

    def restrict(v, elementwise):
        if v is None:
            return None
        if elementwise:
            return v.sub(lo, hi)
        return v.sub([lo[0]] + [0] * (v.ndim - 1), [hi[0]] + [s - 1 for s in v.shape[1:]])

    return data.sub(lo, hi), [restrict(v, e) for v, e in others]


# max8 ----------------------------------------------------------------------------
def _max8(dst, src, mask, loc) -> None:
    name = "max8"
    src = _tile(src, "src", name, loc)
    dst = _tile(dst, "dst", name, loc)
    _rank(src, MAX_DATA_RANK, "src", name, loc)
    _rank(dst, MAX_DST_RANK, "dst", name, loc)
    src, (dst,) = _masked(mask, src, [(dst, False)], loc)
    if src is None:
        return
    _same_partitions(name, loc, src=src, dst=dst)
    _elements(src, SEARCH_VALUES, MAX_SEARCH_ELEMENTS, "src", name, loc)
    _elements(dst, SEARCH_VALUES, SEARCH_VALUES, "dst", name, loc)
    current().emit("max8", "vector", dst, [src], loc=loc)


def max8(dst=None, src=None, name=None, *, mask=None, dtype=None, **kwargs):
    """The 8 largest values of each partition of ``src``, descending, into
    ``dst`` [P, 8] (converted to dst's type). Without ``dst``, the original
    form: a new [P, 8] tile is returned."""
    loc = user_location()
    if dst is None:
        return legacy_max8(src=src, mask=mask, dtype=dtype)
    _max8(dst, src, mask, loc)
    return None


def legacy_max8(*, src, mask=None, dtype=None, **kwargs) -> View:
    """``neuronxcc.nki.isa.max8``: a new [P, 8] tile of ``dtype`` (default
    the source's) holding the 8 largest values of each partition."""
    loc = user_location()
    x = _tile(src, "src", "max8", loc)
    out = nl._new_tile((x.shape[0], SEARCH_VALUES), dtype or x.dtype, loc)
    _max8(out, x, mask, loc)
    return out


# nc_find_index8 --------------------------------------------------------------------
def _find_index8(dst, data, vals, mask, loc) -> None:
    name = "nc_find_index8"
    data = _tile(data, "data", name, loc)
    vals = _tile(vals, "vals", name, loc)
    dst = _tile(dst, "dst", name, loc)
    _rank(data, MAX_DATA_RANK, "data", name, loc)
    _rank(vals, MAX_VALS_RANK, "vals", name, loc)
    _rank(dst, MAX_DST_RANK, "dst", name, loc)
    _index_dtype(dst, "dst", name, loc)
    data, (vals, dst) = _masked(mask, data, [(vals, False), (dst, False)], loc)
    if data is None:
        return
    _same_partitions(name, loc, data=data, vals=vals, dst=dst)
    _elements(data, SEARCH_VALUES, MAX_SEARCH_ELEMENTS, "data", name, loc)
    _elements(vals, SEARCH_VALUES, SEARCH_VALUES, "vals", name, loc)
    _elements(dst, SEARCH_VALUES, SEARCH_VALUES, "dst", name, loc)
    current().emit("find_index8", "vector", dst, [data, vals], loc=loc)


def nc_find_index8(dst=None, data=None, vals=None, name=None, *, mask=None, dtype=None, **kwargs):
    """``dst[p, i]`` = the position of ``vals[p, i]`` among the elements of
    partition ``p`` of ``data`` (first occurrence; equal values take
    successive occurrences; all ones if absent). Without ``dst``, the
    original form: a new [P, 8] tile is returned."""
    loc = user_location()
    if dst is None:
        return legacy_nc_find_index8(data=data, vals=vals, mask=mask, dtype=dtype)
    _find_index8(dst, data, vals, mask, loc)
    return None


def legacy_nc_find_index8(*, data, vals, mask=None, dtype=None, **kwargs) -> View:
    """``neuronxcc.nki.isa.nc_find_index8``: a new [P, 8] tile of indices
    (uint32 by default, or uint16)."""
    loc = user_location()
    x = _tile(data, "data", "nc_find_index8", loc)
    out_dtype = _dt.uint32 if dtype is None else _dt.as_dtype(dtype)
    if out_dtype not in INDEX_DTYPES:
        raise error(
            f"nc_find_index8: dtype is {out_dtype.name}; the indices are uint16 or uint32",
            "dtype",
            loc,
        )
    out = nl._new_tile((x.shape[0], SEARCH_VALUES), out_dtype, loc)
    _find_index8(out, x, vals, mask, loc)
    return out


# nc_match_replace8 -----------------------------------------------------------------
def _match_replace8(dst, data, vals, imm, dst_idx, mask, loc) -> None:
    name = "nc_match_replace8"
    data = _tile(data, "data", name, loc)
    vals = _tile(vals, "vals", name, loc)
    dst = _tile(dst, "dst", name, loc)
    _rank(data, MAX_DATA_RANK, "data", name, loc)
    _rank(vals, MAX_VALS_RANK, "vals", name, loc)
    _rank(dst, MAX_DATA_RANK, "dst", name, loc)
    if not nl._is_scalar(imm):
        raise error(
            f"{name}: imm must be a float constant, got {type(imm).__name__}", "operand", loc
        )
    if dst_idx is not None:
        dst_idx = _tile(dst_idx, "dst_idx", name, loc)
        _rank(dst_idx, MAX_DST_RANK, "dst_idx", name, loc)
        _index_dtype(dst_idx, "dst_idx", name, loc)
    data, (vals, dst_idx, dst) = _masked(
        mask, data, [(vals, False), (dst_idx, False), (dst, dst.shape == data.shape)], loc
    )
    if data is None:
        return
    _same_partitions(name, loc, data=data, vals=vals, dst=dst, dst_idx=dst_idx)
    _elements(data, 1, MAX_SEARCH_ELEMENTS, "data", name, loc)
    _elements(vals, SEARCH_VALUES, SEARCH_VALUES, "vals", name, loc)
    if _free(dst) != _free(data):
        raise error(
            f"{name}: dst {list(dst.shape)} has {_free(dst)} elements per partition, the data "
            f"{list(data.shape)} {_free(data)}; the replaced output has the data's shape",
            "shape",
            loc,
        )
    if dst_idx is not None:
        _elements(dst_idx, SEARCH_VALUES, SEARCH_VALUES, "dst_idx", name, loc)
        for what, v in (("data", data), ("vals", vals), ("dst", dst)):
            if v.buf is dst_idx.buf:
                raise error(
                    f"{name}: dst_idx is in the same tile as {what}; it needs its own",
                    "operand",
                    loc,
                )
    srcs = [data, vals] + ([dst_idx] if dst_idx is not None else [])
    current().emit("match_replace8", "vector", dst, srcs, imm=(float(imm),), loc=loc)


def nc_match_replace8(
    dst=None,
    data=None,
    vals=None,
    imm=None,
    dst_idx=None,
    name=None,
    *,
    mask=None,
    dtype=None,
    **kwargs,
):
    """``dst`` = ``data`` with the first occurrence of each of the 8 values
    ``vals[p, :]`` replaced by ``imm`` (``dst`` may be ``data`` itself); with
    ``dst_idx``, their positions too. Without ``dst``, the original form: a
    new tile of the replaced data is returned."""
    loc = user_location()
    if dst is None:
        return legacy_nc_match_replace8(
            data=data, vals=vals, imm=imm, dst_idx=dst_idx, mask=mask, dtype=dtype
        )
    if imm is None:
        raise error("nc_match_replace8: imm is required", "operand", loc)
    _match_replace8(dst, data, vals, imm, dst_idx, mask, loc)
    return None


def legacy_nc_match_replace8(
    *, data, vals, imm, dst_idx=None, mask=None, dtype=None, **kwargs
) -> View:
    """``neuronxcc.nki.isa.nc_match_replace8``: a new tile of the data's
    shape (``dtype``, default the data's) with the matches replaced."""
    loc = user_location()
    x = _tile(data, "data", "nc_match_replace8", loc)
    out = nl._new_tile(x.shape, dtype or x.dtype, loc)
    _match_replace8(out, x, vals, imm, dst_idx, mask, loc)
    return out


# nonzero_with_count -----------------------------------------------------------------
def _int32_scalar(x, what: str, name: str, loc) -> int:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise error(f"{name}: {what} must be an int32 constant, got {x!r}", "operand", loc)
    if not INT32_MIN <= int(x) <= INT32_MAX:
        raise error(f"{name}: {what} {int(x)} is outside the int32 range", "operand", loc)
    return int(x)


def nonzero_with_count(dst, src, index_offset=0, padding_val=-1, name=None, **kwargs) -> None:
    """For partitions 0, 16, ..., 112 of ``src`` [P, T] (each GpSimd core's
    first): the positions plus ``index_offset`` of its nonzero elements,
    then ``padding_val``, then their count, into ``dst`` [P, T + 1]. The
    other partitions of ``dst`` are not written."""
    loc = user_location()
    op = "nonzero_with_count"
    src = _tile(src, "src", op, loc)
    dst = _tile(dst, "dst", op, loc)
    for what, v in (("src", src), ("dst", dst)):
        if v.buf.space != SBUF:
            where = "PSUM" if v.buf.space == PSUM else "HBM"
            raise error(
                f"{op}: {what} is in {where}; the GpSimd engine reads and writes SBUF only",
                "buffer",
                loc,
            )
    if src.dtype not in NONZERO_SRC_DTYPES:
        raise error(f"{op}: src is {src.dtype.name}; it must be float32 or int32", "dtype", loc)
    if dst.dtype != _dt.int32:
        raise error(f"{op}: dst is {dst.dtype.name}; it must be int32", "dtype", loc)
    offset = _int32_scalar(index_offset, "index_offset", op, loc)
    padding = _int32_scalar(padding_val, "padding_val", op, loc)
    _same_partitions(op, loc, src=src, dst=dst)
    if _free(dst) != _free(src) + 1:
        raise error(
            f"{op}: dst {list(dst.shape)} has {_free(dst)} elements per partition; it must "
            f"have one more than src {list(src.shape)} ({_free(src) + 1}: the indices, "
            "then the count)",
            "shape",
            loc,
        )
    current().emit(
        "nonzero_with_count", "gpsimd", dst, [src], imm=(float(offset), float(padding)), loc=loc
    )
    # It writes some partitions of dst only: never the instruction a later
    # copy of the whole tile may be folded into (trace.retarget_last).
    dst.buf.producer = -1


__all__ = [
    "max8",
    "nc_find_index8",
    "nc_match_replace8",
    "nonzero_with_count",
    "legacy_max8",
    "legacy_nc_find_index8",
    "legacy_nc_match_replace8",
]
