"""Tracing an NKI kernel into a tile program.

The kernel runs once per (argument shapes, dtypes, grid, constants) with every
loop unrolled: each ``nl``/``nisa`` call appends instructions over affine
access patterns of buffers (kernel arguments and results in HBM, tiles in
SBUF and PSUM). The records go to the C++ simulator (``runtime/nki``) as flat
integer arrays; it checks the whole program, plans its memory, estimates its
cost and runs it.

Everything a single call can check (shapes, partition and matmul limits,
dtype rules, bounds, writes to immutable inputs) is checked here, at the
call, so that the error names the kernel line that made it.
"""

from __future__ import annotations

import math
import os
import sys
import threading

from . import dtypes as dt
from . import layout
from .errors import NKIError
from .indexing import DynSlice, Expr, Pred, access_axes, broadcast_shapes, fit_to

# Memory spaces, NeuronCore limits, opcodes, engines and flag bits: the
# simulator's own (layout.py reads them from the C++ runtime).
HBM, SBUF, PSUM = (layout.SPACES[name] for name in ("hbm", "sbuf", "psum"))
SPACE_NAMES = {code: name for name, code in layout.SPACES.items()}
MAX_DIMS = layout.MAX_DIMS
PMAX = layout.PARTITIONS
SBUF_BYTES_PER_PARTITION = layout.SBUF_BYTES_PER_PARTITION
PSUM_BANK_BYTES = layout.PSUM_BANK_BYTES
PSUM_BYTES_PER_PARTITION = layout.PSUM_BANKS * layout.PSUM_BANK_BYTES
OP = layout.OPS
ENGINE = layout.ENGINES
ENGINE_NAMES = {v: k for k, v in ENGINE.items()}
FLAG_ACCUMULATE = layout.FLAGS["accumulate"]
FLAG_REVERSE0 = layout.FLAGS["reverse0"]
FLAG_REVERSE1 = layout.FLAGS["reverse1"]
FLAG_OPERAND0_IMM = layout.FLAGS["operand0_imm"]
FLAG_OPERAND1_IMM = layout.FLAGS["operand1_imm"]
FLAG_NEGATE = layout.FLAGS["negate"]
FLAG_INITIAL_TILE = layout.FLAGS["initial_tile"]
FLAG_DYNAMIC_DST = layout.FLAGS["dynamic_dst"]
FLAG_VECTOR_OFFSET = layout.FLAGS["vector_offset"]
FLAG_OOB_SKIP = layout.FLAGS["oob_skip"]

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
# The kernel library is kernel code: its lines are the ones to report.
_KERNELS_DIR = os.path.join(_PKG_DIR, "kernels") + os.sep
_state = threading.local()


def current() -> Trace:
    t = getattr(_state, "trace", None)
    if t is None:
        raise NKIError(
            "NKI language functions can only be called while a kernel runs "
            "(inside a function decorated with @nki.jit)"
        )
    return t


def user_location() -> tuple[str, int, str]:
    """The innermost stack frame outside this package: the kernel's line."""
    f = sys._getframe(1)
    while (
        f is not None
        and f.f_code.co_filename.startswith(_PKG_DIR)
        and not (f.f_code.co_filename.startswith(_KERNELS_DIR))
    ):
        f = f.f_back
    if f is None:
        return ("<unknown>", 0, "<unknown>")
    return (f.f_code.co_filename, f.f_lineno, f.f_code.co_name)


def error(message: str, limit: str | None = None, loc=None) -> NKIError:
    filename, lineno, _ = loc or user_location()
    return NKIError(message, filename=filename, lineno=lineno, limit=limit)


class Buf:
    """A buffer of the tile program."""

    __slots__ = (
        "index",
        "space",
        "dtype",
        "shape",
        "name",
        "loc",
        "external",
        "initialized",
        "mutable",
        "producer",
        "consumed",
        "kind",
        "pending_zero",
    )

    def __init__(
        self,
        index,
        space,
        dtype,
        shape,
        name,
        loc,
        external=-1,
        initialized=False,
        mutable=True,
        kind="tile",
    ):
        self.index = index
        self.space = space
        self.dtype = dtype
        self.shape = tuple(shape)
        self.name = name
        self.loc = loc
        self.external = external
        self.initialized = initialized
        self.mutable = mutable
        self.producer = -1  # the instruction that wrote it whole (fusion)
        self.consumed = False
        self.kind = kind  # "tile", "input", "output", "scratch"
        # nl.zeros of a PSUM tile: the zeroing is deferred (the location of
        # the call), so that a matmul group accumulating into it can write
        # the first product instead, as the NKI compiler does.
        self.pending_zero = None

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    def describe(self, trace: Trace) -> str:
        where = ""
        if self.loc is not None and self.loc >= 0:
            f, line, _ = trace.locs[self.loc]
            where = f" allocated at {os.path.basename(f)}:{line}"
        label = self.name or {"input": "argument", "output": "result"}.get(self.kind, "tile")
        return f"{SPACE_NAMES[self.space]} {label} {list(self.shape)} {self.dtype.name}{where}"


class Trace:
    """The tile program being recorded."""

    def __init__(self, grid: tuple):
        self.buffers: list[Buf] = []
        self.words: list[int] = []
        self.imms: list[float] = []
        self.instr_locs: list[int] = []
        self.locs: list[tuple] = []
        self._loc_ids: dict = {}
        self.externals = 0
        self.grid = grid
        self.program_id: tuple = (0,) * len(grid)
        self.shared: dict = {}  # shared_hbm allocations, by allocation order
        self.shared_counter = 0
        self.ninstr = 0
        self.prints: list = []  # nl.device_print: (prefix, constant, buffer)
        self.matmul_written: set = set()  # PSUM regions a matmul wrote (accumulate=None)

    # Locations -------------------------------------------------------
    def loc_id(self, loc) -> int:
        i = self._loc_ids.get(loc)
        if i is None:
            i = len(self.locs)
            self.locs.append(loc)
            self._loc_ids[loc] = i
        return i

    # Buffers ---------------------------------------------------------
    def new_buffer(self, space, dtype, shape, name="", loc=None, **kw) -> Buf:
        dtype = dt.as_dtype(dtype)
        shape = tuple(int(s) for s in shape)
        loc = loc or user_location()
        if any(s < 0 for s in shape):
            raise error(f"negative dimension in shape {shape}", "shape", loc)
        if space in (SBUF, PSUM):
            if len(shape) < 1:
                raise error("an on-chip tile needs a partition dimension", "shape", loc)
            if shape[0] > PMAX:
                raise error(
                    f"partition dimension {shape[0]} of tile {list(shape)} exceeds the "
                    f"{PMAX} partitions of {SPACE_NAMES[space].upper()} (the first dimension "
                    "of a tile is its partition dimension)",
                    "partition-dim",
                    loc,
                )
            per_partition = math.prod(shape[1:]) * dtype.itemsize
            limit = SBUF_BYTES_PER_PARTITION if space == SBUF else PSUM_BYTES_PER_PARTITION
            if per_partition > limit:
                raise error(
                    f"tile {list(shape)} {dtype.name} needs {per_partition} bytes per partition; "
                    f"{SPACE_NAMES[space].upper()} has {limit} per partition",
                    "sbuf-capacity" if space == SBUF else "psum-capacity",
                    loc,
                )
        b = Buf(len(self.buffers), space, dtype, shape, name, self.loc_id(loc), **kw)
        self.buffers.append(b)
        return b

    def argument(self, dtype, shape, strides, name, mutable) -> View:
        b = self.new_buffer(
            HBM,
            dtype,
            shape,
            name,
            loc=("<argument>", 0, name),
            external=self.externals,
            initialized=True,
            mutable=mutable,
            kind="input",
        )
        self.externals += 1
        # An argument's memory may be a strided view: its "elements" are the
        # span its strides reach.
        span = 1 + sum((s - 1) * st for s, st in zip(shape, strides, strict=False) if s > 0)
        b.shape = (max(span, 0),) if shape and all(s > 0 for s in shape) else (0,)
        return View(b, 0, tuple(shape), tuple(strides))

    # Instructions ----------------------------------------------------
    def emit(
        self,
        op: str,
        engine: str,
        dst,
        srcs=(),
        *,
        alu0=0,
        alu1=0,
        act=0,
        flags=0,
        keep=0,
        imm=(0.0, 0.0, 0.0, 0.0),
        loc=None,
        oob_skip=False,
    ) -> int:
        loc = loc or user_location()
        for v in (dst, *srcs):
            if isinstance(v, View) and v.buf.pending_zero is not None:
                self.flush_zero(v.buf)
        if op != "dma_dynamic" and any(
            isinstance(v, View) and v.dyn is not None for v in (dst, *srcs)
        ):
            # A DMA with a run-time index: the simulator's dynamic DMA.
            srcs, flags, keep, imm = _dynamic_dma(op, engine, dst, srcs, flags, oob_skip, loc)
            return self.emit(
                "dma_dynamic", "dma", dst, srcs, flags=flags, keep=keep, imm=imm, loc=loc
            )
        words = [OP[op], ENGINE[engine], alu0, alu1, act, flags, self.loc_id(loc), keep]
        words += access_words(dst, loc)
        srcs = list(srcs) + [None] * (3 - len(srcs))
        for s in srcs:
            words += access_words(s, loc)
            if isinstance(s, View):
                s.buf.consumed = True
        self.words += words
        imm = list(imm) + [0.0] * (layout.IMMEDIATES - len(imm))
        self.imms += [float(x) for x in imm[: layout.IMMEDIATES]]
        self.instr_locs.append(self.loc_id(loc))
        idx = self.ninstr
        self.ninstr += 1
        if isinstance(dst, View):
            if dst.buf.kind == "input" and not dst.buf.mutable:
                raise error(
                    f"writes to the kernel input '{dst.buf.name}', which is not declared "
                    "mutable (annotate the parameter as nt.mutable_tensor, or return a new "
                    "tensor)",
                    "immutable-input",
                    loc,
                )
            dst.buf.producer = idx if dst.covers_buffer() else -1
            dst.buf.consumed = False
        return idx

    # An instruction record: HEADER words (emit() writes them in
    # layout.INSTRUCTION_FIELDS order), then dst and the three sources,
    # ACCESS words each.
    HEADER = len(layout.INSTRUCTION_FIELDS)
    ACCESS = layout.ACCESS_WORDS
    _OP_WORD = layout.INSTRUCTION_FIELDS.index("op")
    _FLAGS_WORD = layout.INSTRUCTION_FIELDS.index("flags")

    def flush_zero(self, buf: Buf) -> None:
        """Emits the deferred zeroing of a PSUM tile (something else reads
        or writes it first)."""
        loc = buf.pending_zero
        buf.pending_zero = None
        self.emit("memset", "vector", View.contiguous(buf), (), imm=(0.0,), loc=loc)

    def retarget_last(self, value: View, target: View, accumulate: bool = False) -> bool:
        """Makes the last instruction (which wrote `value`'s whole buffer,
        unread since) write `target` instead: ``t[...] = nl.add(a, b)`` and
        ``psum[...] += nl.matmul(a, b)`` become one instruction, as the NKI
        compiler emits them. `value` becomes a view of `target`."""
        b = value.buf
        idx = self.ninstr - 1
        if b.producer != idx or b.consumed or idx < 0:
            return False
        if value.shape != target.shape or not value.covers_buffer():
            return False
        base = idx * layout.INSTRUCTION_WORDS
        op = self.words[base + self._OP_WORD]
        if not accumulate and target.dtype != value.dtype and op not in (OP["copy"],):
            return False
        if accumulate and op != OP["matmul"]:
            return False
        # The Tensor engine writes PSUM only: into SBUF its result is copied.
        if op in (OP["matmul"], OP["transpose"]) and target.buf.space != PSUM:
            return False
        # The instruction must not read the target's buffer (unless it is
        # element-wise over exactly the same elements).
        src_words = self.words[
            base + self.HEADER + self.ACCESS : base + self.HEADER + 4 * self.ACCESS
        ]
        tw = access_words(target, None)
        for s in range(3):
            w = src_words[s * self.ACCESS : (s + 1) * self.ACCESS]
            if w[0] == target.buf.index and (
                op in (OP["matmul"], OP["transpose"], OP["reduce"], OP["scan"], OP["gather"])
                or w != tw
            ):
                return False
        if target.buf.kind == "input" and not target.buf.mutable:
            return False
        if target.buf.pending_zero is not None:
            # A whole zeroed PSUM tile: the product is its first value (an
            # accumulation group starts by overwriting). A part of one: the
            # zeros must come first, which they no longer can.
            if not target.covers_buffer():
                return False
            target.buf.pending_zero = None
            accumulate = False
        self.words[base + self.HEADER : base + self.HEADER + self.ACCESS] = tw
        if accumulate:
            self.words[base + self._FLAGS_WORD] |= FLAG_ACCUMULATE
        target.buf.producer = idx if target.covers_buffer() else -1
        target.buf.consumed = False
        value.alias(target)
        return True


def access_words(v, loc) -> list[int]:
    """The words of an access pattern (layout.ACCESS_FIELDS: buffer, ndim,
    offset, sizes, strides)."""
    if v is None:
        return [-1, 0, 0] + [0] * (2 * MAX_DIMS)
    if isinstance(v, Expr):
        shape, strides, offset, buf = v.shape, v.coef, v.base, -1
    else:
        shape, strides, offset, buf = v.shape, v.strides, v.offset, v.buf.index
    shape, strides = merge_dims(shape, strides)
    if len(shape) > MAX_DIMS:
        raise error(f"access of rank {len(shape)} (at most {MAX_DIMS} dimensions)", "shape", loc)
    pad = MAX_DIMS - len(shape)
    return [buf, len(shape), offset, *shape, *([0] * pad), *strides, *([0] * pad)]


def merge_dims(shape, strides):
    """The access as is, unless its rank is above the simulator's limit:
    then dims that are contiguous with the next (and size-1 dims) merge."""
    if len(shape) <= MAX_DIMS:
        return tuple(shape), tuple(strides)
    out_s, out_t = [shape[0]], [strides[0]]
    for s, t in zip(shape[1:], strides[1:], strict=False):
        if out_t[-1] == s * t or out_s[-1] == 1:
            out_t[-1] = t
            out_s[-1] *= s
        elif s == 1:
            continue
        else:
            out_s.append(s)
            out_t.append(t)
    return tuple(out_s), tuple(out_t)


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
        raise error(
            "a tile has no truth value while a kernel is traced; "
            "use nl.where / masks for data-dependent choices"
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

    def covers_buffer(self) -> bool:
        if self.offset != 0 or self.shape != self.buf.shape:
            return False
        acc = 1
        for s, t in zip(reversed(self.shape), reversed(self.strides), strict=False):
            if s != 1 and t != acc:
                return False
            acc *= s
        return True

    def alias(self, other: View) -> None:
        self.buf, self.offset, self.shape = other.buf, other.offset, other.shape
        self.strides, self.checks, self.dyn = other.strides, other.checks, other.dyn

    def static_only(self, what: str, loc=None) -> None:
        """Raises if this view is indexed at run time: only a DMA moves one
        (the other view builders would drop the run-time offset)."""
        if self.dyn is not None:
            raise _dynamic_index_error(
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
                self.checks,
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
            Check(c.expr.broadcast_to(shape), c.limit, c.dim, c.loc) for c in self.checks
        )
        return View(self.buf, self.offset, shape, tuple(strides), checks)

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
        self.static_only("an access pattern (ap)", loc)
        if scalar_offset is not None and vector_offset is not None:
            raise error("ap(): give scalar_offset or vector_offset, not both", "index", loc)
        self.verify(loc=loc)
        shape = tuple(int(n) for _, n in pattern)
        strides = tuple(int(st) for st, _ in pattern)
        v = View(self.buf, self.offset + int(offset), shape, strides)
        lo = v.offset + sum(min(0, st * (n - 1)) for st, n in pattern)
        hi = v.offset + sum(max(0, st * (n - 1)) for st, n in pattern)
        if math.prod(shape) and (lo < 0 or hi >= self.buf.elements):
            raise error(
                f"ap(): the pattern reaches elements {lo}..{hi} of "
                f"{self.buf.describe(current())}, which has {self.buf.elements}",
                "out-of-bounds",
                loc,
            )
        if scalar_offset is None and vector_offset is None:
            return v
        return _ap_dynamic(self, v, scalar_offset, vector_offset, indirect_dim, loc)

    # Bounds ----------------------------------------------------------
    def verify(self, lo=None, hi=None, loc=None) -> None:
        """Raises if a pending index check fails over positions lo..hi."""
        for c in self.checks:
            shape = (
                self.shape if hi is None else tuple(h - a + 1 for a, h in zip(lo, hi, strict=False))
            )
            vmin, vmax = c.expr.bounds(shape, lo)
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
            _restrict(lo, hi, a, e.base, k)
            _restrict(lo, hi, a, c.limit - 1 - e.base, -k)
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
        return index_view(self, key, user_location())

    def is_indirect(self) -> bool:
        return False

    def indirect(self, indices, num_elem=None, **kwargs) -> IndirectView:
        """NKI's tensor indirection (``NkiTensor.indirect``): the columns of
        this SBUF/PSUM tile at the offsets an SBUF ``uint16`` index tile
        holds, read at run time. Partitions form groups of 16; output column
        i of the group starting at partition g takes the offset at
        ``indices[g + i % 16, i // 16]``. ``num_elem`` columns (default: all
        the index tile's offsets)."""
        loc = user_location()
        return IndirectView(self, indices, num_elem, loc)

    def __setitem__(self, key, value) -> None:
        target = index_view(self, key, user_location())
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


def _dynamic_index_error(what: str, loc, hint: str | None = None) -> NKIError:
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
        raise _dynamic_index_error("indexing with a tensor indirection", loc)
    if not isinstance(k, View):
        raise error(
            f"{what} read at run time must be an SBUF tile, got {type(k).__name__} "
            "(registers are not supported yet: load the value into a [1, 1] tile)",
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
        raise _dynamic_index_error(
            f"a tile of indices of shape {list(t.shape)}",
            loc,
            "indirect DMA takes one index per partition, a [P, 1] tile (a row of the "
            "tensor per partition of the tile moved)",
        )
    return View(t.buf, t.offset, (t.shape[0],), (t.strides[0],))


def _dynamic_dma(op, engine, dst, srcs, flags, oob_skip, loc):
    """The dma_dynamic record of a DMA whose destination or source has a
    run-time index: (srcs, flags, keep, imm)."""
    srcs = list(srcs)
    if op != "copy" or engine != "dma":
        what = "dst_rmw_op (a DMA that accumulates)" if engine == "dma" else f"{op}"
        raise _dynamic_index_error(
            f"{what} on a tensor indexed at run time",
            loc,
            "only a DMA copy (nl.load, nl.store, nisa.dma_copy without dst_rmw_op) "
            "moves a tensor indexed at run time",
        )
    dynamic = [(side, v) for side, v in (("dst", dst), ("src", srcs[0])) if v.dyn is not None]
    if len(dynamic) > 1:
        raise _dynamic_index_error(
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


def _ap_dynamic(t: View, v: View, scalar_offset, vector_offset, dim, loc) -> View:
    """``t.ap(..., scalar_offset=s | vector_offset=idx, indirect_dim=dim)``."""
    dim = int(dim)
    if t.buf.space != HBM:
        raise _dynamic_index_error(
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


def _int_or_expr(x, loc=None):
    if isinstance(x, Expr):
        return x
    if isinstance(x, (View, IndirectView)):
        raise _dynamic_index_error("indexing with a tensor (dynamic or indirect indexing)", loc)
    try:
        return int(x)
    except TypeError as e:
        raise IndexError(
            f"an index must be an integer, a slice or an NKI index expression, "
            f"not {type(x).__name__}"
        ) from e


def _dynamic_components(v: View, key: tuple, loc):
    """Replaces the tiles among the indices by static placeholders: (key, the
    position of the run-time index, its tile, whether it is one index per
    partition). A one-element tile is an integer read at run time (alone or
    as the start of nl.ds); a [P, 1] tile gives one row per partition."""
    found = None
    out = []
    for j, k in enumerate(key):
        tile = None
        if isinstance(k, DynSlice) and isinstance(k.start, (View, IndirectView)):
            tile = _index_tile(k.start, loc, "the start of nl.ds")
            if tile.size != 1:
                raise error(
                    f"nl.ds(start, {k.size}): a start read at run time is one value, got a "
                    f"tile of shape {list(tile.shape)}",
                    "index",
                    loc,
                )
            k, vector = DynSlice(0, k.size, k.step), False
        elif isinstance(k, (View, IndirectView)):
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
                raise _dynamic_index_error(
                    "more than one index read at run time in one access",
                    loc,
                    "one index of an access may come from a tile (NKI's DMA takes one "
                    "dynamic offset per access)",
                )
            if v.buf.space != HBM:
                raise _dynamic_index_error(
                    "indexing an on-chip tile with a tile of indices",
                    loc,
                    "run-time indices select rows of an HBM tensor that a DMA moves; for "
                    "columns of an on-chip tile use tensor indirection, "
                    "t.indirect(index_tile, num_elem=n), as the source of nisa.tensor_copy",
                )
            found = (j, tile, vector)
        out.append(k)
    return tuple(out), found


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
    key, dynamic = _dynamic_components(v, key, loc)
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
            dyn = _index_dyn(v, j, e, coord, full, dynamic, loc)
            continue
        checks.append(Check(coord, v.shape[j], j, loc))
    return View(v.buf, offset, full, tuple(strides) + tuple(rest_strides), checks, dyn)


def _index_dyn(v: View, j: int, e: Expr, coord: Expr, full: tuple, dynamic, loc) -> Dyn:
    """The run-time index of dimension j of ``v[...]``: ``coord`` is the
    static part of its position (the value 0)."""
    _, tile, vector = dynamic
    if vector:
        # One row per partition: the index must vary along the tile's
        # partition axis (the first of the result).
        axis = [a for a, used in enumerate(e.axes) if used]
        if axis != [0] or full[0] != tile.shape[0]:
            raise _dynamic_index_error(
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


def _restrict(lo: list, hi: list, a: int, base: int, k: int) -> None:
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
        _restrict(lo, hi, a, e.base, c)
        if lo[a] > hi[a]:
            return None
    return lo, hi
