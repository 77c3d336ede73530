"""Index expressions of NKI kernels: ``nl.arange``, ``nl.mgrid``, ``nl.ds`` and
the masks built from them.

Every loop of a traced kernel is unrolled, so an index is affine in the
positions of the tile it selects: ``base + sum(coef[a] * i[a])`` over the
axes ``a`` of its (broadcast) shape. Comparisons of indices give predicates
(``expr >= 0`` terms) used as masks; ``mask_box`` gives the positions of a
tile a mask keeps.

Each axis is also marked by whether the expression is built from the index
variable of that axis (``nl.arange`` / an ``nl.mgrid`` component), whatever
its extent: ``iw`` of ``ix, iw, iy = nl.mgrid[0:128, 0:1, 0:n]`` is built from
axis 1 although that axis has one position. An access whose indices leave
some axes of their grid unused drops those axes (see ``access_axes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from .trace_state import error


class Expr:
    """An affine index expression over the axes of ``shape``."""

    __slots__ = ("shape", "base", "coef", "axes")

    def __init__(self, shape: tuple, base: int, coef: tuple, axes: tuple | None = None):
        self.shape = tuple(int(s) for s in shape)
        self.base = int(base)
        # Which axes the expression is built from; by default those it steps along.
        self.axes = tuple(bool(c) for c in coef) if axes is None else tuple(bool(a) for a in axes)
        self.coef = tuple(int(c) if s != 1 else 0 for c, s in zip(coef, self.shape, strict=False))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"Expr(shape={self.shape}, base={self.base}, coef={self.coef}, axes={self.axes})"

    def _same_axes(self, base: int, coef: tuple) -> Expr:
        return Expr(self.shape, base, coef, self.axes)

    def take_axes(self, keep: tuple) -> Expr:
        """The expression over only the axes ``keep`` (it must not step along the others)."""
        return Expr(
            tuple(self.shape[a] for a in keep),
            self.base,
            tuple(self.coef[a] for a in keep),
            tuple(self.axes[a] for a in keep),
        )

    def pad_axes(self, n: int) -> Expr:
        """The expression with ``n`` trailing axes of size 1 (a (P,) tile's
        index read as (P, 1))."""
        return Expr(
            self.shape + (1,) * n, self.base, self.coef + (0,) * n, self.axes + (False,) * n
        )

    # Range over the whole shape.
    def bounds(self, shape: tuple | None = None, lo: tuple | None = None) -> tuple[int, int]:
        shape = self.shape if shape is None else shape
        lo_v = hi_v = self.base
        off = len(shape) - self.ndim
        for a, c in enumerate(self.coef):
            n = shape[a + off] if shape else 1
            start = lo[a + off] if lo is not None else 0
            lo_v += c * start
            hi_v += c * start
            span = c * (n - 1)
            if span < 0:
                lo_v += span
            else:
                hi_v += span
        return lo_v, hi_v

    def broadcast_to(self, shape: tuple) -> Expr:
        shape = tuple(shape)
        if len(shape) < self.ndim:
            raise IndexError(f"cannot broadcast index of shape {self.shape} to {shape}")
        pad = len(shape) - self.ndim
        for s, t in zip(self.shape, shape[pad:], strict=False):
            if s != 1 and s != t:
                raise IndexError(f"index shapes {self.shape} and {shape} do not broadcast")
        return Expr(shape, self.base, (0,) * pad + self.coef, (False,) * pad + self.axes)

    def __getitem__(self, key) -> Expr:
        if not isinstance(key, tuple):
            key = (key,)
        shape, coef, axes = [], [], []
        axis = 0
        base = self.base

        def keep_axis():
            nonlocal axis
            shape.append(self.shape[axis])
            coef.append(self.coef[axis])
            axes.append(self.axes[axis])
            axis += 1

        for k in key:
            if k is None:
                shape.append(1)
                coef.append(0)
                axes.append(False)
            elif isinstance(k, slice):
                n = self.shape[axis]
                start, stop, step = k.indices(n)
                length = max(0, (stop - start + (step - (1 if step > 0 else -1))) // step)
                base += self.coef[axis] * start
                shape.append(length)
                coef.append(self.coef[axis] * step)
                axes.append(self.axes[axis])
                axis += 1
            elif isinstance(k, int):
                base += self.coef[axis] * (k % self.shape[axis])
                axis += 1
            elif k is Ellipsis:
                rest = sum(1 for x in key if x is not None and x is not Ellipsis)
                for _ in range(self.ndim - rest):
                    keep_axis()
            else:
                raise IndexError(f"cannot index an index expression with {k!r}")
        while axis < self.ndim:
            keep_axis()
        return Expr(tuple(shape), base, tuple(coef), tuple(axes))

    def _combine(self, other, sign: int) -> Expr:
        if isinstance(other, Expr):
            shape = _broadcast_shapes(self.shape, other.shape)
            a, b = self.broadcast_to(shape), other.broadcast_to(shape)
            return Expr(
                shape,
                a.base + sign * b.base,
                tuple(x + sign * y for x, y in zip(a.coef, b.coef, strict=False)),
                tuple(x or y for x, y in zip(a.axes, b.axes, strict=False)),
            )
        if _is_int(other):
            return self._same_axes(self.base + sign * int(other), self.coef)
        return NotImplemented

    def __add__(self, other):
        return self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other):
        return self._combine(other, -1)

    def __rsub__(self, other):
        r = self._combine(other, -1)
        return NotImplemented if r is NotImplemented else -r

    def __neg__(self) -> Expr:
        return self._same_axes(-self.base, tuple(-c for c in self.coef))

    def __pos__(self) -> Expr:
        return self

    def __mul__(self, other):
        if _is_int(other):
            k = int(other)
            return self._same_axes(self.base * k, tuple(c * k for c in self.coef))
        if isinstance(other, Expr):
            if not any(other.coef):
                return self * other.base
            if not any(self.coef):
                return other * self.base
            raise IndexError("the product of two index expressions is not affine")
        return NotImplemented

    __rmul__ = __mul__

    def __floordiv__(self, other):
        if (
            _is_int(other)
            and all(c % int(other) == 0 for c in self.coef)
            and (self.base % int(other) == 0)
        ):
            k = int(other)
            return self._same_axes(self.base // k, tuple(c // k for c in self.coef))
        raise IndexError("index expressions must stay affine: // only by a divisor of every term")

    # Comparisons give predicates.
    def _pred(self, other, kind: str) -> Pred:
        d = self - other  # self - other
        if kind == ">=":
            return Pred((d,))
        if kind == ">":
            return Pred((d - 1,))
        if kind == "<=":
            return Pred((-d,))
        if kind == "<":
            return Pred((-d - 1,))
        if kind == "==":
            return Pred((d, -d))
        raise ValueError(kind)

    def __ge__(self, o):
        return self._pred(o, ">=")

    def __gt__(self, o):
        return self._pred(o, ">")

    def __le__(self, o):
        return self._pred(o, "<=")

    def __lt__(self, o):
        return self._pred(o, "<")

    def __eq__(self, o):  # noqa: D105
        if isinstance(o, Expr) or _is_int(o):
            return self._pred(o, "==")
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __index__(self) -> int:
        if self.ndim == 0 or not any(self.coef):
            return self.base
        raise TypeError("an index expression over a tile is not a single integer")

    def __int__(self) -> int:
        return self.__index__()


@dataclass(frozen=True)
class Pred:
    """A mask: the conjunction of ``expr >= 0`` terms."""

    terms: tuple

    def __and__(self, other: Pred) -> Pred:
        if not isinstance(other, Pred):
            return NotImplemented
        return Pred(self.terms + other.terms)

    __rand__ = __and__

    @property
    def shape(self) -> tuple:
        shape: tuple = ()
        for t in self.terms:
            shape = _broadcast_shapes(shape, t.shape)
        return shape


class DynSlice:
    """``nl.ds(start, size)``: ``size`` elements from ``start``."""

    __slots__ = ("start", "size", "step")

    def __init__(self, start, size, step=1):
        self.start = start
        self.size = int(size)
        self.step = int(step)

    def __repr__(self) -> str:
        return f"ds({self.start}, {self.size})"


def ds(start, size, step: int = 1) -> DynSlice:
    return DynSlice(start, size, step)


def arange(start, stop=None, step: int = 1) -> Expr:
    if stop is None:
        start, stop = 0, start
    start, stop, step = int(start), int(stop), int(step)
    n = max(0, -(-(stop - start) // step))
    return Expr((n,), start, (step,), (True,))


class _MGridResult(tuple):
    """What ``nl.mgrid[...]`` returns: unpacks as a tuple; ``.p`` / ``.x``
    (and ``.y``, ``.z``) name the axes as NKI does."""

    @property
    def p(self):
        return self[0]

    @property
    def x(self):
        return self[1]

    @property
    def y(self):
        return self[2]

    @property
    def z(self):
        return self[3]


class _MGrid:
    def __getitem__(self, key) -> _MGridResult:
        if not isinstance(key, tuple):
            key = (key,)
        ranges = []
        for k in key:
            if not isinstance(k, slice):
                raise IndexError("nl.mgrid takes slices: nl.mgrid[0:128, 0:512]")
            ranges.append(arange(k.start or 0, k.stop, k.step or 1))
        n = len(ranges)
        shape = tuple(r.shape[0] for r in ranges)
        out = []
        for a, r in enumerate(ranges):
            coef = [0] * n
            coef[a] = r.coef[0]
            out.append(Expr(shape, r.base, tuple(coef), tuple(b == a for b in range(n))))
        return _MGridResult(out)


mgrid = _MGrid()


def _is_int(x) -> bool:
    return (
        isinstance(x, int)
        and not isinstance(x, bool)
        or type(x).__name__ in ("int64", "int32", "intc", "int_")
    )


def _broadcast_shapes(a: tuple, b: tuple) -> tuple:
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b, strict=False):
        if x != y and x != 1 and y != 1:
            raise IndexError(f"index shapes {a} and {b} do not broadcast")
        out.append(y if x == 1 else x)
    return tuple(out)


broadcast_shapes = _broadcast_shapes


def access_axes(indices: list, positions: int) -> tuple:
    """The axes of the index grid an access ``t[i0, i1, ...]`` iterates over,
    in the order of the tile it gives (``indices`` broadcast to one grid).

    When the grid has no more axes than the access has index positions, the
    tile is the grid (NumPy's broadcasting). When it has more, as with
    ``ix, iw, iy = nl.mgrid[0:128, 0:1, 0:n]`` and ``a[ix, iy]``, the tile
    iterates over the axes the indices are built from, taken position by
    position: ``a[ix, iy]`` is a ``[128, n]`` tile and ``g[iw, iy]`` a
    ``[1, n]`` one, as with ``ix = nl.arange(128)[:, None]``,
    ``iw = nl.arange(1)[:, None]`` and ``iy = nl.arange(n)[None, :]``; with
    ``ip, jf, iq = nl.mgrid[0:128, 0:n, 0:1]``, ``g[iq, jf]`` is ``[1, n]``.
    A tile keeps a partition and a free axis: when the indices are built from
    fewer than two axes the whole grid stays (``x[iy]`` of a vector with
    ``nl.mgrid[0:1, 0:n]`` is ``[1, n]``).
    """
    ndim = max((e.ndim for e in indices), default=0)
    if ndim <= positions:
        return tuple(range(ndim))
    keep: list = []
    for e in indices:
        for a, used in enumerate(e.axes, start=ndim - e.ndim):
            if used and a not in keep:
                keep.append(a)
    return tuple(keep) if len(keep) >= 2 else tuple(range(ndim))


def fit_to(term: Expr, shape: tuple) -> Expr:
    """A mask term over the tile ``shape``. A term over more axes than the tile
    (a mask built from a grid with axes the access dropped, see ``access_axes``)
    first loses axes it is not built from, one-position axes first; the
    choice does not change its values, only how its axes line up with the
    tile's."""
    shape = tuple(shape)
    extra = term.ndim - len(shape)
    if extra > 0:
        free = [a for a in range(term.ndim) if not term.axes[a] and not term.coef[a]]
        free.sort(key=lambda a: (term.shape[a] != 1, a))
        for drop in combinations(free, extra):
            keep = tuple(a for a in range(term.ndim) if a not in drop)
            candidate = term.take_axes(keep)
            try:
                return candidate.broadcast_to(shape)
            except IndexError:
                continue
        raise IndexError(f"a mask of shape {term.shape} does not fit the tile {shape}")
    return term.broadcast_to(shape)


def restrict(lo: list, hi: list, a: int, base: int, k: int) -> None:
    """Narrows axis a's range lo[a]..hi[a] to the i with base + k*i >= 0
    (k != 0; integer arithmetic: -(base // k) is ceil(-base / k))."""
    if k > 0:
        lo[a] = max(lo[a], -(base // k))
    else:
        hi[a] = min(hi[a], base // -k)


def mask_box(mask, shape, loc):
    """The positions of ``shape`` a mask keeps, as a box (lo, hi) per axis,
    or None if it keeps none. Masks are conjunctions of one-axis bounds."""
    lo = [0] * len(shape)
    hi = [s - 1 for s in shape]
    if mask is None:
        return lo, hi
    if isinstance(mask, Expr):
        raise error("a mask must be a comparison of indices (e.g. i_p < n)", "mask", loc)
    if not isinstance(mask, Pred):
        if mask is True:
            return lo, hi
        raise error(
            f"a mask must be a predicate over indices, not {type(mask).__name__}", "mask", loc
        )
    for t in mask.terms:
        try:
            e = fit_to(t, shape)
        except IndexError:
            raise error(
                f"mask of shape {list(t.shape)} does not match the tile {list(shape)}", "mask", loc
            ) from None
        axes = [a for a, c in enumerate(e.coef) if c]
        if not axes:
            if e.base < 0:
                return None
            continue
        if len(axes) > 1:
            raise error(
                "masks that couple two dimensions are not supported here; use nisa.affine_select",
                "mask",
                loc,
            )
        a = axes[0]
        c = e.coef[a]
        restrict(lo, hi, a, e.base, c)
        if lo[a] > hi[a]:
            return None
    return lo, hi
