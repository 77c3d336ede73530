"""Index expressions of NKI kernels: ``nl.arange``, ``nl.mgrid``, ``nl.ds`` and
the masks built from them.

Every loop of a traced kernel is unrolled, so an index is affine in the
positions of the tile it selects: ``base + sum(coef[a] * i[a])`` over the
axes ``a`` of its (broadcast) shape. Comparisons of indices give predicates
(``expr >= 0`` terms) used as masks.
"""

from __future__ import annotations

from dataclasses import dataclass


class Expr:
    """An affine index expression over the axes of ``shape``."""

    __slots__ = ("shape", "base", "coef")

    def __init__(self, shape: tuple, base: int, coef: tuple):
        self.shape = tuple(int(s) for s in shape)
        self.base = int(base)
        self.coef = tuple(int(c) if s != 1 else 0 for c, s in zip(coef, self.shape, strict=False))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"Expr(shape={self.shape}, base={self.base}, coef={self.coef})"

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
        return Expr(shape, self.base, (0,) * pad + self.coef)

    def __getitem__(self, key) -> Expr:
        if not isinstance(key, tuple):
            key = (key,)
        shape, coef = [], []
        axis = 0
        base = self.base
        for k in key:
            if k is None:
                shape.append(1)
                coef.append(0)
            elif isinstance(k, slice):
                n = self.shape[axis]
                start, stop, step = k.indices(n)
                length = max(0, (stop - start + (step - (1 if step > 0 else -1))) // step)
                base += self.coef[axis] * start
                shape.append(length)
                coef.append(self.coef[axis] * step)
                axis += 1
            elif isinstance(k, int):
                base += self.coef[axis] * (k % self.shape[axis])
                axis += 1
            elif k is Ellipsis:
                rest = sum(1 for x in key if x is not None and x is not Ellipsis)
                for _ in range(self.ndim - rest):
                    shape.append(self.shape[axis])
                    coef.append(self.coef[axis])
                    axis += 1
            else:
                raise IndexError(f"cannot index an index expression with {k!r}")
        while axis < self.ndim:
            shape.append(self.shape[axis])
            coef.append(self.coef[axis])
            axis += 1
        return Expr(tuple(shape), base, tuple(coef))

    def _combine(self, other, sign: int) -> Expr:
        if isinstance(other, Expr):
            shape = _broadcast_shapes(self.shape, other.shape)
            a, b = self.broadcast_to(shape), other.broadcast_to(shape)
            return Expr(
                shape,
                a.base + sign * b.base,
                tuple(x + sign * y for x, y in zip(a.coef, b.coef, strict=False)),
            )
        if _is_int(other):
            return Expr(self.shape, self.base + sign * int(other), self.coef)
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
        return Expr(self.shape, -self.base, tuple(-c for c in self.coef))

    def __pos__(self) -> Expr:
        return self

    def __mul__(self, other):
        if _is_int(other):
            k = int(other)
            return Expr(self.shape, self.base * k, tuple(c * k for c in self.coef))
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
            return Expr(self.shape, self.base // k, tuple(c // k for c in self.coef))
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
    return Expr((n,), start, (step,))


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
            out.append(Expr(shape, r.base, tuple(coef)))
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
