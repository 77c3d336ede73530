"""The tensors of a traced kernel: ``View``, an access pattern over a buffer
(an HBM argument or result, or an SBUF/PSUM tile), and ``Check``, a bounds
check its indices leave pending until it is used.

Indexing a view is view_indexing.py's (integers, slices, index expressions)
and dynamic_index.py's (indices read when the kernel runs, tensor
indirection); arithmetic on tiles is the language's (language.py). They all
build views, so they are built on this module and hand themselves over when
they load (below).
"""

from __future__ import annotations

import math

from . import dtypes as dt
from .indexing import Expr, broadcast_shapes, restrict
from .trace_state import HBM, SPACE_NAMES, Buf, current, error, user_location


class Check:
    """A pending bounds check of an index: ``0 <= expr < limit`` over the
    view's positions. Checked when the view is used (after its mask)."""

    __slots__ = ("expr", "limit", "dim", "loc")

    def __init__(self, expr: Expr, limit: int, dim: int, loc):
        self.expr = expr
        self.limit = limit
        self.dim = dim
        self.loc = loc


# The tile operators of View (`a + b`, `t[...] = v`, `psum += x`) are the
# language's functions. The language is built on this module, not the other
# way round: language.py hands itself over when it loads (kernel.py loads it
# before any kernel is traced).
_language = None


def use_language(module) -> None:
    global _language
    _language = module


# Indexing a view (`t[i, j]`, `t.indirect(...)`, `t.ap(..., scalar_offset=s)`)
# builds views, so it is built on this module too: view_indexing.py and
# dynamic_index.py hand themselves over when they load (trace.py loads both,
# before any view of a trace is indexed).
_view_indexing = None
_dynamic_index = None
# Dtype views (`t.view(dtype)`, `t.ap(..., dtype=X)`) are bitcast.py's, which
# builds views too and hands itself over the same way (trace.py loads it).
_bitcast = None


def use_bitcast(module) -> None:
    global _bitcast
    _bitcast = module


def use_view_indexing(module) -> None:
    global _view_indexing
    _view_indexing = module


def use_dynamic_index(module) -> None:
    global _dynamic_index
    _dynamic_index = module


def note_handle(trace, buf: Buf) -> None:
    """Marks ``buf`` as allocated by the kernel (nl.ndarray and kin): a
    handle, whose truth value is True (View.__bool__)."""
    handles = getattr(trace, "handle_buffers", None)
    if handles is None:
        handles = trace.handle_buffers = set()
    handles.add(buf.index)


def _handles() -> set:
    from .trace_state import state

    return getattr(getattr(state, "trace", None), "handle_buffers", None) or set()


class View:
    """A tensor of a kernel: an access pattern over a buffer (an HBM argument
    or result, or an SBUF/PSUM tile). Indexing gives views; arithmetic on
    tiles calls the ``nl`` functions."""

    __slots__ = ("buf", "offset", "shape", "strides", "checks", "dyn", "__weakref__")

    def __init__(self, buf: Buf, offset: int, shape: tuple, strides: tuple, checks=(), dyn=None):
        self.buf = buf
        self.offset = offset
        self.shape = tuple(shape)
        self.strides = tuple(strides)
        self.checks = tuple(checks)
        # A run-time index (Dyn): the view is an operand of a dynamic DMA.
        self.dyn = dyn

    # What kernels read ----------------------------------------------
    @property
    def dtype(self) -> dt.DType:
        return self.buf.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def buffer(self):
        return _language._buffer_for_space(self.buf.space)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return (
            f"<nki {SPACE_NAMES[self.buf.space]} tensor shape={list(self.shape)} "
            f"dtype={self.dtype.name}>"
        )

    def __bool__(self):
        # A tensor handle is true, like any Python object (NKI's tensors are
        # handles while a kernel is traced): an HBM tensor (an argument, or
        # one the kernel allocated) or a tile allocated with nl.ndarray /
        # zeros / full. `if bias:` / `if params.expert_index:` on an optional
        # tensor asks whether it was given (NKI-lib's kernels test them so),
        # never about its values. The result of a value-returning function
        # (`if nl.load(x) > 0:`) looks like a question about its data, which
        # exists only when the kernel runs: that stays an error.
        if self.buf.space == HBM or self.buf.index in _handles():
            return True
        raise error(
            "a computed tile has no truth value while a kernel is traced (its values "
            "exist only when the kernel runs); use nl.where / masks for data-dependent "
            "choices, or nl.if_else on a scalar (nisa.scalar_load)"
        )

    def __iter__(self):
        raise error("tiles are not iterable; index them with nl.arange or slices")

    # Structure -------------------------------------------------------
    @classmethod
    def contiguous(cls, buf: Buf) -> View:
        strides, acc = [], 1
        for s in reversed(buf.shape):
            strides.append(acc)
            acc *= s
        return cls(buf, 0, buf.shape, tuple(reversed(strides)))

    def is_row_major(self) -> bool:
        """Whether the view's elements lie in order, without gaps (any offset)."""
        acc = 1
        for s, t in zip(reversed(self.shape), reversed(self.strides), strict=True):
            if s != 1 and t != acc:
                return False
            acc *= s
        return True

    def covers_buffer(self) -> bool:
        return self.offset == 0 and self.shape == self.buf.shape and self.is_row_major()

    def alias(self, other: View) -> None:
        self.buf, self.offset, self.shape = other.buf, other.offset, other.shape
        self.strides, self.checks, self.dyn = other.strides, other.checks, other.dyn

    def static_only(self, what: str, loc=None) -> None:
        """Raises if this view is indexed at run time: only a DMA moves one
        (the other view builders would drop the run-time offset)."""
        if self.dyn is not None:
            raise _dynamic_index.dynamic_index_error(
                f"{what} of a tensor indexed at run time",
                loc,
                "move it with nl.load / nl.store / nisa.dma_copy as it is",
            )

    def with_shape(self, shape, strides, offset=None) -> View:
        self.static_only("reshaping")
        return View(
            self.buf, self.offset if offset is None else offset, shape, strides, self.checks
        )

    def broadcast_to(self, shape: tuple) -> View:
        shape = tuple(shape)
        if self.shape == shape:
            return self
        self.static_only("broadcasting")
        if self.buf.space != HBM and self.ndim < len(shape):
            # A tile's dims line up from the partition dim: a (P,) reduction
            # result broadcasts as (P, 1).
            pad = len(shape) - self.ndim
            return View(
                self.buf,
                self.offset,
                self.shape + (1,) * pad,
                self.strides + (0,) * pad,
                tuple(Check(c.expr.pad_axes(pad), c.limit, c.dim, c.loc) for c in self.checks),
            ).broadcast_to(shape)
        n = len(shape)
        if self.buf.space != HBM and 0 < n < self.ndim and all(s == 1 for s in self.shape[n:]):
            # And the other way: a [P, 1] tile where a (P,) one is taken (a
            # destination `t[:, j]`): its trailing unit dims go.
            keep = tuple(range(n))
            return View(
                self.buf,
                self.offset,
                self.shape[:n],
                self.strides[:n],
                tuple(Check(c.expr.take_axes(keep), c.limit, c.dim, c.loc) for c in self.checks),
            ).broadcast_to(shape)
        try:
            bshape = broadcast_shapes(self.shape, shape)
        except IndexError:
            bshape = None
        if bshape != shape:
            raise error(
                f"cannot broadcast a tile of shape {list(self.shape)} to {list(shape)}", "shape"
            )
        pad = len(shape) - self.ndim
        strides = [0] * pad + [
            0 if s == 1 and t != 1 else st
            for s, st, t in zip(self.shape, self.strides, shape[pad:], strict=False)
        ]
        checks = tuple(
            Check(self._check_expr(c.expr).broadcast_to(shape), c.limit, c.dim, c.loc)
            for c in self.checks
        )
        return View(self.buf, self.offset, shape, tuple(strides), checks)

    def _check_expr(self, e: Expr) -> Expr:
        """A bounds check's index over this view's axes: on a tile, an index
        with fewer axes (``t[:, j]``'s (P,)) lines up from the partition dim."""
        if self.buf.space != HBM and e.ndim < self.ndim:
            return e.pad_axes(self.ndim - e.ndim)
        return e

    def reshape(self, *shape) -> View:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = list(int(s) for s in shape)
        if -1 in shape:
            k = shape.index(-1)
            rest = math.prod(s for i, s in enumerate(shape) if i != k)
            shape[k] = self.size // max(rest, 1)
        shape = tuple(shape)
        if math.prod(shape) != self.size:
            raise error(f"cannot reshape {list(self.shape)} to {list(shape)}", "shape")
        self.static_only("reshaping")
        acc, contiguous = 1, True
        for s, t in zip(reversed(self.shape), reversed(self.strides), strict=False):
            if s != 1 and t != acc:
                contiguous = False
            acc *= s
        if not contiguous:
            raise error("reshape needs a contiguous tensor", "shape")
        strides, acc = [], 1
        for s in reversed(shape):
            strides.append(acc)
            acc *= s
        self.verify()
        return View(self.buf, self.offset, shape, tuple(reversed(strides)))

    def view(self, dtype) -> View:
        """The same memory as ``dtype`` (a dtype view, bitcast.py): the
        last dimension scales by the ratio of the element sizes."""
        return _bitcast.view_as(self, dtype, user_location())

    def ap(
        self,
        pattern,
        offset=0,
        scalar_offset=None,
        vector_offset=None,
        indirect_dim=0,
        **kwargs,
    ) -> View:
        """NKI's access pattern: ``t.ap(pattern=[[stride, num], ...], offset=k)``
        is the view of ``num`` elements ``stride`` apart per dimension
        (partition first), from element ``offset`` of this tensor, in
        elements. ``scalar_offset`` (a one-element SBUF tile) moves the
        start by its value along dimension ``indirect_dim`` of this tensor;
        ``vector_offset`` (an SBUF tile of one index per partition) does so
        per partition, in place of the pattern's partition step: a DMA
        gather or scatter of rows (NKI's access-pattern page)."""
        loc = user_location()
        dtype = kwargs.pop("dtype", None)
        if dtype is not None and dtype != self.dtype:
            # Another element type over the same memory (bitcast.py).
            if scalar_offset is not None or vector_offset is not None:
                raise error("ap(dtype=...) with a run-time offset: not supported yet", "dtype", loc)
            return _bitcast.ap_with_dtype(self, pattern, offset, dtype, loc)
        self.static_only("an access pattern (ap)", loc)
        if isinstance(scalar_offset, int) and not isinstance(scalar_offset, bool):
            # A register whose value the trace knows (ncc.rank_id(), a ring
            # iteration's rank in collectives.py: each rank is traced on its
            # own): a static offset along indirect_dim.
            dim = int(indirect_dim)
            if not 0 <= dim < self.ndim or not 0 <= scalar_offset < self.shape[dim]:
                raise error(
                    f"ap(scalar_offset={scalar_offset}, indirect_dim={indirect_dim}) is outside "
                    f"the dimensions {list(self.shape)}",
                    "out-of-bounds",
                    loc,
                )
            offset = int(offset) + scalar_offset * self.strides[dim]
            scalar_offset = None
        if scalar_offset is not None and vector_offset is not None:
            raise error("ap(): give scalar_offset or vector_offset, not both", "index", loc)
        self.verify(loc=loc)
        shape = tuple(int(n) for _, n in pattern)
        strides = tuple(int(st) for st, _ in pattern)
        v = View(self.buf, self.offset + int(offset), shape, strides)
        # A vector offset takes the place of the partition step: the rows it
        # picks are checked when the DMA runs (dynamic_index.py).
        static = pattern[1:] if vector_offset is not None else pattern
        lo = v.offset + sum(min(0, st * (n - 1)) for st, n in static)
        hi = v.offset + sum(max(0, st * (n - 1)) for st, n in static)
        outside = math.prod(shape) and (lo < 0 or hi >= self.buf.elements)
        if outside and scalar_offset is None and vector_offset is None:
            # Kernels build views past the end that they never use (NKI-lib's
            # tile loops): an error when an instruction uses one (after its
            # mask, or clipped by oob_mode=skip), as for indices.
            reach = Check(Expr(shape, v.offset, strides), self.buf.elements, None, loc)
            return View(self.buf, v.offset, shape, strides, (reach,))
        if outside:
            raise error(
                f"ap(): the pattern reaches elements {lo}..{hi} of "
                f"{self.buf.describe(current())}, which has {self.buf.elements}",
                "out-of-bounds",
                loc,
            )
        if scalar_offset is None and vector_offset is None:
            return v
        return _dynamic_index.ap_dynamic(self, v, scalar_offset, vector_offset, indirect_dim, loc)

    # Bounds ----------------------------------------------------------
    def verify(self, lo=None, hi=None, loc=None) -> None:
        """Raises if a pending index check fails over positions lo..hi."""
        for c in self.checks:
            shape = (
                self.shape if hi is None else tuple(h - a + 1 for a, h in zip(lo, hi, strict=False))
            )
            vmin, vmax = c.expr.bounds(shape, lo)
            if (vmin < 0 or vmax >= c.limit) and c.dim is None:
                # Raised where the view is used; the message says where it was built.
                built = f" (built by ap() at line {c.loc[1]})" if c.loc else ""
                raise error(
                    f"ap(): the pattern reaches elements {vmin}..{vmax} of "
                    f"{self.buf.describe(current())}, which has {c.limit}{built}",
                    "out-of-bounds",
                    loc or c.loc,
                )
            if vmin < 0 or vmax >= c.limit:
                raise error(
                    f"index out of bounds: dimension {c.dim} of {self.buf.describe(current())} "
                    f"has size {c.limit}, and is indexed from {vmin} to {vmax}",
                    "out-of-bounds",
                    c.loc or loc,
                )

    def clip_box(self, lo, hi):
        """Narrows positions lo..hi to those whose indices are in bounds
        (DMA ``oob_mode=skip``)."""
        lo, hi = list(lo), list(hi)
        for c in self.checks:
            axes = [a for a, k in enumerate(c.expr.broadcast_to(self.shape).coef) if k]
            e = c.expr.broadcast_to(self.shape)
            if not axes:
                v = e.base
                if v < 0 or v >= c.limit:
                    return None
                continue
            if len(axes) > 1:
                return lo, hi
            a = axes[0]
            k = e.coef[a]
            # 0 <= base + k*i  and  (limit - 1 - base) - k*i >= 0
            restrict(lo, hi, a, e.base, k)
            restrict(lo, hi, a, c.limit - 1 - e.base, -k)
            if lo[a] > hi[a]:
                return None
        return lo, hi

    def sub(self, lo, hi) -> View:
        """The positions lo..hi (inclusive) of this view."""
        off = self.offset + sum(a * s for a, s in zip(lo, self.strides, strict=False))
        shape = tuple(h - a + 1 for a, h in zip(lo, hi, strict=False))
        checks = []
        for c in self.checks:
            e = c.expr.broadcast_to(self.shape)
            checks.append(
                Check(
                    Expr(
                        shape, e.base + sum(k * a for k, a in zip(e.coef, lo, strict=False)), e.coef
                    ),
                    c.limit,
                    c.dim,
                    c.loc,
                )
            )
        dyn = self.dyn.sub(self.shape, lo, hi) if self.dyn is not None else None
        return View(self.buf, off, shape, self.strides, checks, dyn)

    # Indexing --------------------------------------------------------
    def __getitem__(self, key) -> View:
        return _view_indexing.index_view(self, key, user_location())

    def is_indirect(self) -> bool:
        return False

    def indirect(self, indices, num_elem=None, **kwargs) -> _dynamic_index.IndirectView:
        """NKI's tensor indirection (``NkiTensor.indirect``): the columns of
        this SBUF/PSUM tile at the offsets an SBUF ``uint16`` index tile
        holds, read at run time. Partitions form groups of 16; output column
        i of the group starting at partition g takes the offset at
        ``indices[g + i % 16, i // 16]``. ``num_elem`` columns (default: all
        the index tile's offsets)."""
        loc = user_location()
        return _dynamic_index.IndirectView(self, indices, num_elem, loc)

    def __setitem__(self, key, value) -> None:
        target = _view_indexing.index_view(self, key, user_location())
        if value is target:
            return
        _language._assign(target, value)

    # Arithmetic (tiles) ----------------------------------------------
    def _bin(self, name, other, reverse=False):
        fn = getattr(_language, name)
        return fn(other, self) if reverse else fn(self, other)

    def __add__(self, o):
        return self._bin("add", o)

    def __radd__(self, o):
        return self._bin("add", o, True)

    def __sub__(self, o):
        return self._bin("subtract", o)

    def __rsub__(self, o):
        return self._bin("subtract", o, True)

    def __mul__(self, o):
        return self._bin("multiply", o)

    def __rmul__(self, o):
        return self._bin("multiply", o, True)

    def __truediv__(self, o):
        return self._bin("divide", o)

    def __rtruediv__(self, o):
        return self._bin("divide", o, True)

    def __pow__(self, o):
        return self._bin("power", o)

    def __neg__(self):
        return _language.negative(self)

    def __matmul__(self, o):
        return _language.matmul(self, o)

    def __lt__(self, o):
        return self._bin("less", o)

    def __le__(self, o):
        return self._bin("less_equal", o)

    def __gt__(self, o):
        return self._bin("greater", o)

    def __ge__(self, o):
        return self._bin("greater_equal", o)

    def __and__(self, o):
        return self._bin("bitwise_and", o)

    def __or__(self, o):
        return self._bin("bitwise_or", o)

    def __xor__(self, o):
        return self._bin("bitwise_xor", o)

    def __iadd__(self, o):
        _language._accumulate(self, o, "add")
        return self

    def __isub__(self, o):
        _language._accumulate(self, o, "subtract")
        return self

    def __imul__(self, o):
        _language._accumulate(self, o, "multiply")
        return self

    __hash__ = object.__hash__
