"""Indexing a view: ``t[i, j]`` with integers, slices, ``nl.ds`` and index
expressions (``nl.arange``, ``nl.mgrid``) gives the view of the positions they
select, its bounds checks left pending (``view.Check``) until it is used. A
tile among the indices is an index read at run time (dynamic_index.py).

Built on view.py (indexing builds views); View reaches ``index_view`` through
the hand-over at the end of this module.
"""

from __future__ import annotations

import sys

from .dynamic_index import (
    IndirectView,
    dynamic_components,
    dynamic_index_error,
    index_dyn,
)
from .indexing import DynSlice, Expr, access_axes, broadcast_shapes
from .trace_state import error
from .view import Check, View, use_view_indexing


def _int_or_expr(x, loc=None):
    if isinstance(x, Expr):
        return x
    if isinstance(x, (View, IndirectView)):
        raise dynamic_index_error("indexing with a tensor (dynamic or indirect indexing)", loc)
    try:
        return int(x)
    except TypeError as e:
        raise IndexError(
            f"an index must be an integer, a slice or an NKI index expression, "
            f"not {type(x).__name__}"
        ) from e


def index_view(v: View, key, loc) -> View:
    if v.checks:
        v.verify(loc=loc)
    v.static_only("indexing again", loc)
    if not isinstance(key, tuple):
        key = (key,)
    if any(k is Ellipsis for k in key):
        i = next(i for i, k in enumerate(key) if k is Ellipsis)
        fill = v.ndim - (len(key) - 1)
        key = key[:i] + (slice(None),) * fill + key[i + 1 :]
    if len(key) > v.ndim:
        raise error(f"too many indices ({len(key)}) for a tensor of rank {v.ndim}", "index", loc)
    key, dynamic = dynamic_components(v, key, loc)
    key = tuple(
        _int_or_expr(k, loc) if not isinstance(k, (slice, DynSlice, Expr)) else k for k in key
    )
    nk = len(key)
    advanced = any(isinstance(k, Expr) and k.ndim > 0 for k in key)
    # Each component as an affine expression over the result's positions.
    comps: list[Expr] = []
    if not advanced:
        shape = []
        for k in key:
            if isinstance(k, (slice, DynSlice)):
                shape.append(_slice_len(k, v.shape[len(comps)], loc))
                comps.append(None)  # filled below
            else:
                comps.append(None)
        rshape = tuple(shape)
        out_axis = 0
        exprs = []
        for j, k in enumerate(key):
            if isinstance(k, (slice, DynSlice)):
                start, step = _slice_start_step(k, v.shape[j])
                coef = [0] * len(rshape)
                coef[out_axis] = step
                exprs.append(Expr(rshape, int(start), tuple(coef)))
                out_axis += 1
            else:
                val = k.base if isinstance(k, Expr) else int(k)
                if val < 0:
                    val += v.shape[j]
                exprs.append(Expr(rshape, val, (0,) * len(rshape)))
        comps = exprs
    else:
        placed = []
        for j, k in enumerate(key):
            if isinstance(k, (slice, DynSlice)):
                start, step = _slice_start_step(k, v.shape[j])
                n = _slice_len(k, v.shape[j], loc)
                shp = [1] * nk
                shp[j] = n
                coef = [0] * nk
                coef[j] = step
                placed.append(Expr(tuple(shp), int(start), tuple(coef)))
            elif isinstance(k, Expr):
                if k.ndim == 1 and nk > 1:
                    shp = [1] * nk
                    shp[j] = k.shape[0]
                    coef = [0] * nk
                    coef[j] = k.coef[0]
                    # A run-time index's placeholder keeps its axis (it
                    # has no coefficient to show it).
                    axes = None
                    if dynamic is not None and dynamic[0] == j:
                        axes = tuple(a == j for a in range(nk))
                    placed.append(Expr(tuple(shp), k.base, tuple(coef), axes))
                else:
                    placed.append(k)
            else:
                placed.append(Expr((), int(k), ()))
        rshape: tuple = ()
        try:
            for e in placed:
                rshape = broadcast_shapes(rshape, e.shape)
        except IndexError as e:
            raise error(str(e), "index", loc) from None
        comps = [e.broadcast_to(rshape) for e in placed]
        keep = access_axes(comps, nk)
        if keep != tuple(range(len(rshape))):
            comps = [e.take_axes(keep) for e in comps]
    # Dims of v not indexed stay, after the result's.
    rest_shape = v.shape[nk:]
    rest_strides = v.strides[nk:]
    rshape = comps[0].shape if comps else ()
    offset = v.offset
    strides = [0] * len(rshape)
    checks = []
    full = rshape + rest_shape
    pad = len(rest_shape)
    dyn = None
    for j, e in enumerate(comps):
        offset += v.strides[j] * e.base
        for a, c in enumerate(e.coef):
            strides[a] += v.strides[j] * c
        coord = Expr(full, e.base, e.coef + (0,) * pad)
        if dynamic is not None and dynamic[0] == j:
            dyn = index_dyn(v, j, e, coord, full, dynamic, loc)
            continue
        checks.append(Check(coord, v.shape[j], j, loc))
    return View(v.buf, offset, full, tuple(strides) + tuple(rest_strides), checks, dyn)


def _slice_start_step(k, n):
    if isinstance(k, DynSlice):
        start = k.start.base if isinstance(k.start, Expr) else int(k.start)
        return start, k.step
    step = 1 if k.step is None else int(k.step)
    if k.start is None:
        start = 0 if step > 0 else n - 1
    else:
        start = int(k.start)
        if start < 0:
            start += n
    return start, step


def _slice_len(k, n, loc) -> int:
    if isinstance(k, DynSlice):
        return k.size
    start, step = _slice_start_step(k, n)
    if step == 0:
        raise error("slice step cannot be zero", "index", loc)
    if k.stop is None:
        stop = n if step > 0 else -1
    else:
        stop = int(k.stop)
        if stop < 0:
            stop += n
    length = max(0, -(-(stop - start) // step))
    return length


# View's indexing (t[...]) is this module's (see view.py).
use_view_indexing(sys.modules[__name__])
