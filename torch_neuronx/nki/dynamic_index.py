"""Indices read when the kernel runs (NKI's dynamic and indirect indexing).

``Dyn`` is the run-time index of a view that a DMA moves
(``t[idx_tile[i_p, 0], i_f]``, ``t[nl.ds(idx, n)]``,
``t.ap(..., scalar_offset=s)``); ``dynamic_dma`` writes the simulator's
``dma_dynamic`` record for it. ``IndirectView`` is tensor indirection
(``t.indirect(indices)``). A use the simulator does not support yet raises
the NKIError ``dynamic_index_error`` gives.

Built on view.py (these build views); View reaches this module through the
hand-over at its end.
"""

from __future__ import annotations

import sys

from . import dtypes as dt
from .errors import NKIError
from .indexing import DynSlice, Expr
from .trace_state import (
    FLAG_DYNAMIC_DST,
    FLAG_OOB_SKIP,
    FLAG_VECTOR_OFFSET,
    HBM,
    SBUF,
    SPACE_NAMES,
    current,
    error,
)
from .view import View, use_dynamic_index

INDIRECTION_GROUP = 16  # partitions that share the offsets of a tensor indirection


class IndirectView:
    """``t.indirect(indices, num_elem=n)``: the [P, n] columns of the tile
    ``t`` (its free dims flattened) at the offsets in ``indices``. Only
    ``nisa.tensor_copy`` reads one (the simulator's gather instruction);
    every other use is an NKIError."""

    __slots__ = ("data", "indices", "shape", "loc")

    def __init__(self, data: View, indices, num_elem, loc):
        if not isinstance(data, View) or data.buf.space == HBM:
            raise error(
                "t.indirect(...): tensor indirection selects columns of an SBUF or PSUM "
                "tile (load the data with nl.load first)",
                "operand",
                loc,
            )
        if not isinstance(indices, View) or indices.buf.space != SBUF:
            raise error(
                "t.indirect(indices): the offsets must be an SBUF tile, got "
                + (
                    f"a tile in {SPACE_NAMES[indices.buf.space].upper()}"
                    if isinstance(indices, View)
                    else type(indices).__name__
                ),
                "operand",
                loc,
            )
        if indices.dtype.name != "uint16":
            raise error(
                f"t.indirect(indices): the offsets must be uint16, got {indices.dtype.name}",
                "dtype",
                loc,
            )
        parts = data.shape[0]
        if indices.ndim != 2 or indices.shape[0] != parts:
            raise error(
                f"t.indirect(indices): the index tile {list(indices.shape)} must be 2-D with "
                f"the data tile's {parts} partitions",
                "shape",
                loc,
            )
        if parts % INDIRECTION_GROUP:
            raise error(
                f"t.indirect(...): the data tile has {parts} partitions; tensor indirection "
                f"works on whole groups of {INDIRECTION_GROUP} partitions",
                "partition-dim",
                loc,
            )
        capacity = INDIRECTION_GROUP * indices.shape[1]
        n = capacity if num_elem is None else int(num_elem)
        if not 0 < n <= capacity:
            raise error(
                f"t.indirect(..., num_elem={n}): the index tile {list(indices.shape)} holds "
                f"{capacity} offsets per group of {INDIRECTION_GROUP} partitions",
                "shape",
                loc,
            )
        self.data = data
        self.indices = indices
        self.shape = (parts, n)
        self.loc = loc

    @property
    def dtype(self) -> dt.DType:
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return 2

    def is_indirect(self) -> bool:
        return True

    def unsupported(self, where: str, loc=None) -> NKIError:
        return error(
            f"{where} of a tensor indirection (t.indirect(...)) is not supported yet: the "
            "simulator supports it as the source of nisa.tensor_copy only (copy the "
            "gathered columns into a tile, then compute on that)",
            "operand",
            loc,
        )

    def __getitem__(self, key):
        raise self.unsupported("indexing")

    def __setitem__(self, key, value):
        raise self.unsupported("writing through")


def dynamic_index_error(what: str, loc, hint: str | None = None) -> NKIError:
    return error(
        f"{what} is not supported yet: "
        + (
            hint
            or "a tile of indices may index an HBM tensor that a DMA moves (nl.load, "
            "nl.store, nisa.dma_copy): a one-element tile as an integer or as the start "
            "of nl.ds, a [P, 1] tile as one row index per partition; for columns of an "
            "on-chip tile chosen at run time use tensor indirection, "
            "t.indirect(index_tile, num_elem=n), as the source of nisa.tensor_copy"
        ),
        "index",
        loc,
    )


class Dyn:
    """The run-time index of a view (NKI's dynamic and indirect DMA
    indexing): the view's start moves by ``value * stride`` elements, the
    value read from ``index`` when the DMA runs. Scalar: ``index`` is one
    element (``cache[idx, ...]``, ``nl.ds(idx, n)``, ``ap(scalar_offset=)``).
    Vector: ``index`` is a ``[P]`` access of one value per partition of the
    view (``data[idx_tile[i_p, 0], i_f]``, ``ap(vector_offset=)``), a gather
    when the view is read and a scatter when it is written.

    The run-time check keeps ``value + lo >= 0`` and ``value + hi < limit``,
    where lo..hi are the positions of dimension ``dim`` (size ``limit``) the
    view reaches with the value 0: ``expr`` gives them over the view's
    positions, or ``span`` when no affine expression does (``ap``)."""

    __slots__ = ("index", "vector", "stride", "limit", "dim", "expr", "span")

    def __init__(self, index, vector, stride, limit, dim, expr=None, span=None):
        self.index = index
        self.vector = vector
        self.stride = int(stride)
        self.limit = int(limit)
        self.dim = int(dim)
        self.expr = expr
        self.span = span

    def bounds(self, shape) -> tuple[int, int]:
        if self.expr is not None:
            return self.expr.bounds(tuple(shape))
        return self.span

    def sub(self, shape, lo, hi) -> Dyn:
        """The index of the positions lo..hi of a view of ``shape``."""
        expr = self.expr
        if expr is not None:
            e = expr.broadcast_to(tuple(shape))
            sub_shape = tuple(h - a + 1 for a, h in zip(lo, hi, strict=False))
            expr = Expr(
                sub_shape, e.base + sum(k * a for k, a in zip(e.coef, lo, strict=False)), e.coef
            )
        index = self.index
        if self.vector:
            index = View(
                index.buf,
                index.offset + lo[0] * index.strides[0],
                (hi[0] - lo[0] + 1,),
                index.strides,
            )
        return Dyn(index, self.vector, self.stride, self.limit, self.dim, expr, self.span)


def _index_tile(k, loc, what: str = "an index") -> View:
    """A tile used as a run-time index: in SBUF, of an integer type (NKI's
    indirect DMA takes int32 / uint32 indices from SBUF)."""
    if isinstance(k, IndirectView):
        raise dynamic_index_error("indexing with a tensor indirection", loc)
    from .control_flow import NkiScalar, as_index_tile

    if isinstance(k, NkiScalar):
        # A register: its value goes through a one-element tile.
        k = as_index_tile(k, loc)
    if not isinstance(k, View):
        raise error(
            f"{what} read at run time must be an SBUF tile or a register, got {type(k).__name__}",
            "index",
            loc,
        )
    if k.buf.space != SBUF:
        raise error(
            f"{what} read at run time must be in SBUF, but it is in "
            f"{SPACE_NAMES[k.buf.space].upper()} (load the indices with nl.load first: "
            "indices have to be in SBUF)",
            "index",
            loc,
        )
    if k.dtype.is_float:
        raise error(
            f"{what} read at run time must be an integer tile (int32 or uint32), "
            f"got {k.dtype.name}",
            "dtype",
            loc,
        )
    k.static_only("indexing with the value", loc)
    k.verify(loc=loc)
    return k


def _vector_index(t: View, loc) -> View:
    """A tile of one index per partition as a [P] access."""
    if any(n != 1 for n in t.shape[1:]):
        raise dynamic_index_error(
            f"a tile of indices of shape {list(t.shape)}",
            loc,
            "indirect DMA takes one index per partition, a [P, 1] tile (a row of the "
            "tensor per partition of the tile moved)",
        )
    return View(t.buf, t.offset, (t.shape[0],), (t.strides[0],))


def dynamic_dma(op, engine, dst, srcs, flags, oob_skip, loc):
    """The dma_dynamic record of a DMA whose destination or source has a
    run-time index: (srcs, flags, keep, imm)."""
    srcs = list(srcs)
    if op != "copy" or engine != "dma":
        what = "dst_rmw_op (a DMA that accumulates)" if engine == "dma" else f"{op}"
        raise dynamic_index_error(
            f"{what} on a tensor indexed at run time",
            loc,
            "only a DMA copy (nl.load, nl.store, nisa.dma_copy without dst_rmw_op) "
            "moves a tensor indexed at run time",
        )
    dynamic = [(side, v) for side, v in (("dst", dst), ("src", srcs[0])) if v.dyn is not None]
    if len(dynamic) > 1:
        raise dynamic_index_error(
            "a DMA indexed at run time on both sides",
            loc,
            "stage the data through an SBUF tile (one DMA in, one out)",
        )
    side, v = dynamic[0]
    d = v.dyn
    lo, hi = d.bounds(v.shape)
    if d.vector and d.index.shape[0] != v.shape[0]:
        raise error(
            f"the tile of indices has {d.index.shape[0]} rows for a DMA of {v.shape[0]} partitions",
            "shape",
            loc,
        )
    flags |= FLAG_DYNAMIC_DST if side == "dst" else 0
    flags |= FLAG_VECTOR_OFFSET if d.vector else 0
    flags |= FLAG_OOB_SKIP if oob_skip else 0
    imm = (float(d.stride), float(d.limit), float(lo), float(hi))
    return [srcs[0], d.index], flags, d.dim, imm


def ap_dynamic(t: View, v: View, scalar_offset, vector_offset, dim, loc) -> View:
    """``t.ap(..., scalar_offset=s | vector_offset=idx, indirect_dim=dim)``."""
    dim = int(dim)
    if t.buf.space != HBM:
        raise dynamic_index_error(
            "ap() with a run-time offset on an on-chip tile",
            loc,
            "the run-time offset applies to an HBM tensor a DMA moves (tensor "
            "indirection, t.indirect(...), selects columns of on-chip tiles)",
        )
    if not 0 <= dim < t.ndim:
        raise error(f"ap(): indirect_dim={dim} for a tensor of rank {t.ndim}", "index", loc)
    vector = vector_offset is not None
    index = _index_tile(vector_offset if vector else scalar_offset, loc, "the offset")
    stride, limit = t.strides[dim], t.shape[dim]
    if vector:
        index = _vector_index(index, loc)
        if index.shape[0] != v.shape[0]:
            raise error(
                f"ap(vector_offset=...): {index.shape[0]} indices for a pattern of "
                f"{v.shape[0]} partitions",
                "shape",
                loc,
            )
        # The index takes the place of the pattern's partition step.
        v = View(v.buf, v.offset, v.shape, (0,) + v.strides[1:])
    elif index.size != 1:
        raise error(
            f"ap(scalar_offset=...): the offset must be one value, got a tile of shape "
            f"{list(index.shape)}",
            "shape",
            loc,
        )
    # Positions of dimension `dim` the static pattern reaches (row-major
    # coordinates of its elements relative to the tensor's start).
    import numpy as np

    grid = np.zeros((1,), dtype=np.int64) + (v.offset - t.offset)
    for n, st in zip(v.shape, v.strides, strict=False):
        if n > 1 and st:
            grid = (grid[:, None] + st * np.arange(n, dtype=np.int64)[None, :]).reshape(-1)
            if grid.size > (1 << 20):  # too many to list: the whole dimension
                grid = np.array([0, stride * (limit - 1)], dtype=np.int64)
                break
    coord = grid // max(stride, 1)
    if dim > 0:
        coord = coord % limit
    lo, hi = int(coord.min()), int(coord.max())
    return View(
        v.buf,
        v.offset,
        v.shape,
        v.strides,
        (),
        Dyn(index, vector, stride, limit, dim, span=(lo, hi)),
    )


def _run_time_index(k) -> bool:
    """A tile, or a register / NkiScalar (control_flow.py), as an index."""
    from .control_flow import NkiScalar

    return isinstance(k, (View, IndirectView, NkiScalar))


def dynamic_components(v: View, key: tuple, loc):
    """Replaces the tiles among the indices by static placeholders: (key, the
    position of the run-time index, its tile, whether it is one index per
    partition). A one-element tile is an integer read at run time (alone or
    as the start of nl.ds); a [P, 1] tile gives one row per partition."""
    found = None
    out = []
    for j, k in enumerate(key):
        tile = None
        if isinstance(k, DynSlice) and _run_time_index(k.start):
            tile = _index_tile(k.start, loc, "the start of nl.ds")
            if tile.size != 1:
                raise error(
                    f"nl.ds(start, {k.size}): a start read at run time is one value, got a "
                    f"tile of shape {list(tile.shape)}",
                    "index",
                    loc,
                )
            k, vector = DynSlice(0, k.size, k.step), False
        elif _run_time_index(k):
            tile = _index_tile(k, loc)
            vector = tile.size != 1
            if vector:
                tile = _vector_index(tile, loc)
                # Static part 0, built from the partition axis of the grid.
                n = tile.shape[0]
                k = Expr(
                    (n,) + (1,) * (k.ndim - 1), 0, (0,) * k.ndim, (True,) + (False,) * (k.ndim - 1)
                )
            else:
                k = 0
        if tile is not None:
            if found is not None:
                raise dynamic_index_error(
                    "more than one index read at run time in one access",
                    loc,
                    "one index of an access may come from a tile (NKI's DMA takes one "
                    "dynamic offset per access)",
                )
            if v.buf.space != HBM:
                raise dynamic_index_error(
                    "indexing an on-chip tile with a tile of indices",
                    loc,
                    "run-time indices select rows of an HBM tensor that a DMA moves; for "
                    "columns of an on-chip tile use tensor indirection, "
                    "t.indirect(index_tile, num_elem=n), as the source of nisa.tensor_copy",
                )
            found = (j, tile, vector)
        out.append(k)
    return tuple(out), found


def index_dyn(v: View, j: int, e: Expr, coord: Expr, full: tuple, dynamic, loc) -> Dyn:
    """The run-time index of dimension j of ``v[...]``: ``coord`` is the
    static part of its position (the value 0)."""
    _, tile, vector = dynamic
    if vector:
        # One row per partition: the index must vary along the tile's
        # partition axis (the first of the result).
        axis = [a for a, used in enumerate(e.axes) if used]
        if axis != [0] or full[0] != tile.shape[0]:
            raise dynamic_index_error(
                "a tile of indices that does not run along the partition axis of the result",
                loc,
                "one index per partition: data[idx_tile[i_p, 0], i_f] with i_p the "
                "partition index (nl.arange(P)[:, None])",
            )
    lo, hi = coord.bounds(full)
    if lo < 0 or hi >= v.shape[j]:
        raise error(
            f"index out of bounds: dimension {j} of {v.buf.describe(current())} has size "
            f"{v.shape[j]}, and the access reaches {hi - lo + 1} positions from its "
            "run-time start",
            "out-of-bounds",
            loc,
        )
    return Dyn(tile, vector, v.strides[j], v.shape[j], j, expr=coord)


# View's run-time indexing (t.indirect, t.ap with a run-time offset, the
# error of View.static_only) is this module's (see view.py).
use_dynamic_index(sys.modules[__name__])
