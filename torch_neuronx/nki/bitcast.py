"""Dtype views: ``t.ap(pattern, offset, dtype=X)`` reads or writes ``t``'s
memory as elements of ``X`` (NKI's access patterns take a dtype: NKI's MX
guide views uint8 HBM data as ``float8_e4m3fn_x4`` so, NKI-lib views bf16
pairs as fp32). The pattern and offset count ``X`` elements.

Such a view's buffer is a ``ViewBuf``: the tensor's buffer seen as an array
of ``X``, so that indexing, shapes and bounds work in ``X``'s units. The
simulator's records have no per-access dtype, so an instruction on a dtype
view becomes a copy of bits (program.h, Op::kRawCopy): a DMA or copy
between a dtype view and a tensor is one raw copy; any other instruction
reads a dtype view through a tile the view's bits are copied into first
(and writes one through a tile copied out after), copies the cost model
counts as free (on the hardware the engine reads the memory as ``X``).
Those tiles take SBUF/PSUM space the hardware would not.
"""

from __future__ import annotations

import math
import sys

from . import dtypes as dt
from .trace_state import Buf, error, user_location
from .view import View, use_bitcast

MAX_DIMS = 5


class ViewBuf(Buf):
    """A buffer seen as an array of another element type (same memory)."""

    __slots__ = ("base",)

    def __init__(self, base: Buf, dtype):
        super().__init__(
            base.index,
            base.space,
            dtype,
            (base.elements * base.dtype.itemsize // dtype.itemsize,),
            base.name,
            base.loc,
            external=base.external,
            initialized=base.initialized,
            kind=base.kind,
            core=base.core,
        )
        self.base = base


def _root(buf: Buf) -> Buf:
    return buf.base if isinstance(buf, ViewBuf) else buf


def ap_with_dtype(view: View, pattern, offset, dtype, loc) -> View:
    """``view.ap(pattern, offset, dtype=dtype)``: the pattern over the
    memory of ``view`` (from its start) read as ``dtype``."""
    dtype = dt.as_dtype(dtype)
    root = _root(view.buf)
    start_bytes = view.offset * view.buf.dtype.itemsize
    if start_bytes % dtype.itemsize:
        raise error(
            f"ap(dtype={dtype.name}): the tensor starts at byte {start_bytes}, not at a "
            f"{dtype.name} element",
            "dtype",
            loc,
        )
    if (root.elements * root.dtype.itemsize) % dtype.itemsize:
        raise error(
            f"ap(dtype={dtype.name}): the tensor is not a whole number of {dtype.name} elements",
            "dtype",
            loc,
        )
    buf = root if dtype == root.dtype else ViewBuf(root, dtype)
    base = View(buf, start_bytes // dtype.itemsize, (buf.elements,), (1,))
    return base.ap(pattern, offset)


def view_as(view: View, dtype, loc) -> View:
    """``view.view(dtype)``: the whole view read as ``dtype``; its last
    dimension (contiguous) scales by the ratio of the element sizes."""
    dtype = dt.as_dtype(dtype)
    if dtype == view.dtype:
        return view
    old, new = view.dtype.itemsize, dtype.itemsize
    shape, strides = tuple(view.shape), tuple(view.strides)
    bad = not shape or strides[-1] != 1 or (shape[-1] * old) % new
    bad = bad or any((s * old) % new for s in strides[:-1])
    if bad:
        raise error(
            f"view({dtype.name}) of a {view.dtype.name} view {list(shape)}: its last dimension "
            f"must be contiguous and hold whole {dtype.name} elements",
            "dtype",
            loc,
        )
    pattern = [[s * old // new, n] for s, n in zip(strides[:-1], shape[:-1], strict=True)]
    pattern.append([1, shape[-1] * old // new])
    return ap_with_dtype(view, pattern, 0, dtype, loc)


def is_dtype_view(v) -> bool:
    return isinstance(v, View) and isinstance(v.buf, ViewBuf)


def in_base_units(v: View, loc) -> View:
    """The same memory as an access of the buffer's own element type: each
    wider element becomes a run of narrower ones (a new last dimension);
    narrower elements must come in whole runs of the buffer's."""
    buf = v.buf
    root = buf.base
    v.verify(loc=loc)
    n, b = buf.dtype.itemsize, root.dtype.itemsize
    shape, strides = tuple(v.shape), tuple(v.strides)
    if not shape:
        shape, strides = (1,), (1,)
    if n == b:
        return View(root, v.offset, shape, strides)
    if n > b:
        r = n // b
        if len(shape) + 1 > MAX_DIMS:
            raise error(
                f"a {buf.dtype.name} view of rank {len(shape)} of {root.dtype.name} memory: at "
                f"most {MAX_DIMS - 1} dimensions",
                "shape",
                loc,
            )
        return View(root, v.offset * r, shape + (r,), tuple(s * r for s in strides) + (1,))
    r = b // n
    if (
        len(shape) < 2
        or strides[-1] != 1
        or shape[-1] % r
        or v.offset % r
        or any(s % r for s in strides[:-1])
    ):
        raise error(
            f"a {buf.dtype.name} view of {root.dtype.name} memory must cover whole "
            f"{root.dtype.name} elements (runs of {r} contiguous {buf.dtype.name} values at "
            "aligned offsets): not supported yet otherwise",
            "dtype",
            loc,
        )
    return View(
        root,
        v.offset // r,
        shape[:-1] + (shape[-1] // r,),
        tuple(s // r for s in strides[:-1]) + (1,),
    )


def emit_through(trace, op, engine, dst, srcs, kwargs) -> int:
    """Emits an instruction some of whose operands are dtype views."""
    loc = kwargs.get("loc") or user_location()
    kwargs = dict(kwargs, loc=loc)
    srcs = list(srcs)
    if op == "copy" and len([s for s in srcs if s is not None]) == 1:
        # A DMA or copy: one raw copy of the bits.
        src = srcs[0]
        d = in_base_units(dst, loc) if is_dtype_view(dst) else dst
        s = in_base_units(src, loc) if is_dtype_view(src) else src
        _same_bytes(dst, src, loc)
        return trace.emit("raw_copy", engine, d, [s], loc=loc)
    if op == "dma_dynamic" or any(isinstance(v, View) and v.dyn is not None for v in (dst, *srcs)):
        raise error(
            "a dtype view (ap(dtype=...)) with a run-time index: not supported yet", "dtype", loc
        )
    for k, s in enumerate(srcs):
        if is_dtype_view(s):
            tile = _tile_like(trace, s, loc)
            trace.emit("raw_copy", engine, tile, [in_base_units(s, loc)], imm=(1.0,), loc=loc)
            srcs[k] = tile
    if not is_dtype_view(dst):
        return trace.emit(op, engine, dst, srcs, **kwargs)
    tile = _tile_like(trace, dst, loc)
    idx = trace.emit(op, engine, tile, srcs, **kwargs)
    trace.emit("raw_copy", engine, in_base_units(dst, loc), [tile], imm=(1.0,), loc=loc)
    return idx


def _tile_like(trace, v: View, loc) -> View:
    """A tile of the view's type and shape (in the view's memory space)."""
    shape = tuple(v.shape) if v.shape else (1,)
    b = trace.new_buffer(v.buf.space, v.buf.dtype, shape, "", loc)
    return View.contiguous(b)


def _same_bytes(dst, src, loc) -> None:
    def row_bytes(v):
        return (math.prod(v.shape[1:]) if len(v.shape) > 1 else 1) * v.dtype.itemsize

    if dst.shape[0] != src.shape[0] or row_bytes(dst) != row_bytes(src):
        raise error(
            f"a copy from {list(src.shape)} {src.dtype.name} to {list(dst.shape)} "
            f"{dst.dtype.name}: a copy through a dtype view moves the same bytes per row "
            f"(first dimension), here {row_bytes(src)} into {row_bytes(dst)}",
            "shape",
            loc,
        )


use_bitcast(sys.modules[__name__])
