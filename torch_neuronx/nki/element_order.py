"""Two accesses of the same number of elements paired in row-major order —
what a DMA between differently shaped patterns moves (``dma_copy`` of a
``[d, h]`` pattern into a ``[d, 1, h]`` slice of a tile, an ``.ap()`` view of
another rank): element k of the source goes to element k of the destination.

The simulator's copy pairs positions index by index, so both sides are
re-expressed over one common shape: each dimension split into the pieces the
other side's dimensions cut it into (a dimension of size n and step s split
into (a, b) is (a, b) with steps (s·b, s)). That exists when every boundary
of one shape's dimensions falls on a boundary of the other's (sizes nest by
divisibility); otherwise the pairing is not one affine access per side.
"""

from __future__ import annotations

from .view import View


def _common_shape(a: tuple, b: tuple) -> list[tuple[int, int, int]] | None:
    """Pieces (size, dim of a, dim of b), outermost first, or None."""
    a = [(n, k) for k, n in enumerate(a) if n != 1]
    b = [(n, k) for k, n in enumerate(b) if n != 1]
    pieces = []
    i = j = 0
    ra = a[0][0] if a else 1
    rb = b[0][0] if b else 1
    while i < len(a) and j < len(b):
        small, large = min(ra, rb), max(ra, rb)
        if large % small:
            return None
        pieces.append((small, a[i][1], b[j][1]))
        ra //= small
        rb //= small
        if ra == 1:
            i += 1
            ra = a[i][0] if i < len(a) else 1
        if rb == 1:
            j += 1
            rb = b[j][0] if j < len(b) else 1
    if i != len(a) or j != len(b):
        return None
    return pieces


def _split(v: View, pieces: list[tuple[int, int]]) -> View:
    """``v`` over the pieces (size, which of v's dims it comes from)."""
    sizes = [n for n, _ in pieces]
    strides = [0] * len(pieces)
    inner: dict[int, int] = {}
    for k in range(len(pieces) - 1, -1, -1):
        n, d = pieces[k]
        strides[k] = v.strides[d] * inner.get(d, 1)
        inner[d] = inner.get(d, 1) * n
    if not sizes:  # one element
        return View(v.buf, v.offset, (1,), (0,))
    return View(v.buf, v.offset, tuple(sizes), tuple(strides))


def paired_views(src: View, dst: View) -> tuple[View, View] | None:
    """``(src', dst')`` of one shape whose positions pair the elements of
    ``src`` and ``dst`` in row-major order; None when no such pair of affine
    accesses exists. Both must have the same number of elements."""
    if src.dyn is not None or dst.dyn is not None:
        return None  # a run-time index is on one dimension: no re-splitting
    pieces = _common_shape(src.shape, dst.shape)
    if pieces is None:
        return None
    src.verify()
    dst.verify()
    return (
        _split(src, [(n, da) for n, da, _ in pieces]),
        _split(dst, [(n, db) for n, _, db in pieces]),
    )


def with_unit_dims(v: View, shape: tuple) -> View | None:
    """``v`` as ``shape`` when the two differ only by dimensions of size 1
    (any steps: a unit dimension moves nothing); None otherwise."""
    if v.dyn is not None:
        return None
    mine = [(n, st) for n, st in zip(v.shape, v.strides, strict=True) if n != 1]
    if [n for n, _ in mine] != [n for n in shape if n != 1]:
        return None
    v.verify()
    it = iter(mine)
    strides = tuple(0 if n == 1 else next(it)[1] for n in shape)
    return View(v.buf, v.offset, tuple(shape), strides)
