"""``nki.language`` (``nl``): tiles, data movement, element-wise math,
reductions, matmul helpers, loops and SPMD ids.

Every function appends instructions to the kernel being traced (see
trace.py) and returns the tile it produced; arithmetic runs on the engine
the NKI compiler would pick (Scalar for transcendental functions, Vector for
ALU operations, Tensor for matmul/transpose, DMA for HBM traffic).
"""

from __future__ import annotations

import builtins as _py
import math
import sys as _sys

import numpy as np

from . import dtypes as _dt
from . import dynamic_index as _dynamic_index
from . import indexing as _indexing
from . import layout as _layout
from . import trace_state as _tr
from . import view as _view
from .dtypes import (  # noqa: F401
    bfloat16,
    bool_,
    float4_e2m1fn_x4,
    float8_e4m3,
    float8_e4m3fn_x4,
    float8_e5m2,
    float8_e5m2_x4,
    float16,
    float32,
    int8,
    int16,
    int32,
    tfloat32,
    uint8,
    uint16,
    uint32,
)
from .errors import NKIError
from .grid import SpmdDim, nc, spmd_dim  # noqa: F401
from .indexing import DynSlice, Expr, Pred, arange, ds, mgrid  # noqa: F401
from .nki_object import NKIObject  # noqa: F401
from .trace_state import HBM, PSUM, SBUF, current, error, user_location
from .view import View

float8_e4m3fn = _dt.float8_e4m3fn  # not float8_e4m3: NKI's two E4M3 types differ
# NKI spells the boolean type both ways. It shadows the builtin in this
# module: code here says _py.bool.
bool = bool_  # noqa: A001


# Buffers ------------------------------------------------------------------
class _Buffer:
    """A memory of the NeuronCore: ``nl.sbuf``, ``nl.psum``, ``nl.hbm``,
    ``nl.shared_hbm``."""

    def __init__(self, name: str, space: int, shared: bool = False):
        self.name = name
        self.space = space
        self.shared = shared

    def __repr__(self) -> str:
        return f"nl.{self.name}"


sbuf = _Buffer("sbuf", SBUF)
psum = _Buffer("psum", PSUM)
hbm = _Buffer("hbm", HBM)
private_hbm = hbm
shared_hbm = _Buffer("shared_hbm", HBM, shared=True)


def _buffer_for_space(space: int) -> _Buffer:
    return {SBUF: sbuf, PSUM: psum, HBM: hbm}[space]


def _as_buffer(buffer) -> _Buffer:
    if buffer is None:
        return sbuf
    if isinstance(buffer, _Buffer):
        return buffer
    if isinstance(buffer, str):
        b = {
            "sbuf": sbuf,
            "psum": psum,
            "hbm": hbm,
            "private_hbm": hbm,
            "shared_hbm": shared_hbm,
        }.get(buffer)
        if b is not None:
            return b
    raise error(
        f"unknown buffer {buffer!r}; use nl.sbuf, nl.psum, nl.hbm or nl.shared_hbm", "buffer"
    )


class tile_size:  # noqa: N801 (NKI's name)
    """Hardware tile limits of the NeuronCore (NKI's ``nl.tile_size``)."""

    pmax = 128
    psum_fmax = 512
    psum_bank_fmax = 512
    psum_bank_fmax_bytes = 2048
    psum_num_banks = 8
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_min_align = 4
    sbuf_min_align = 1
    total_available_sbuf_size = _tr.SBUF_BYTES_PER_PARTITION
    sbuf_fmax_bytes = _tr.SBUF_BYTES_PER_PARTITION


class par_dim(int):  # noqa: N801
    """Marks the partition dimension of a tile with leading block dims:
    ``nl.ndarray((8, nl.par_dim(128), 512), ...)``."""


class _FInfo:
    def __init__(self, d):
        npd = {"float32": np.float32, "float16": np.float16}.get(d.name)
        if npd is not None:
            fi = np.finfo(npd)
            self.max, self.min, self.eps, self.tiny = (
                float(fi.max),
                float(fi.min),
                float(fi.eps),
                float(fi.tiny),
            )
        elif d.name == "bfloat16":
            self.max, self.min, self.eps, self.tiny = (
                3.3895314e38,
                -3.3895314e38,
                0.0078125,
                1.1754944e-38,
            )
        else:
            # float8_e4m3 is IEEE-style (max 240), float8_e4m3fn not (448).
            self.max = {"float8_e4m3": 240.0, "float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}[
                d.name
            ]
            self.min = -self.max
            self.eps = {"float8_e4m3": 0.125, "float8_e4m3fn": 0.125, "float8_e5m2": 0.25}[d.name]
            self.tiny = {"float8_e4m3": 2.0**-6, "float8_e4m3fn": 2.0**-6, "float8_e5m2": 2.0**-14}[
                d.name
            ]
        self.bits = d.itemsize * 8
        self.dtype = d


def finfo(dtype) -> _FInfo:
    return _FInfo(_dt.as_dtype(dtype))


class fp32:  # noqa: N801
    """``nl.fp32.min``: the most negative finite float32."""

    min = float(np.finfo(np.float32).min)
    max = float(np.finfo(np.float32).max)


class bfp16:  # noqa: N801
    min = -3.3895314e38
    max = 3.3895314e38


# Tensor creation --------------------------------------------------------------
def _partition_dim(shape) -> int:
    for i, s in enumerate(shape):
        if isinstance(s, par_dim):
            return i
    return 0


def ndarray(shape, dtype, buffer=None, name: str = "", **kwargs) -> View:
    """A new tensor (undefined values) in ``buffer`` (SBUF by default).

    NKI's signature, ``ndarray(shape, dtype, buffer, name)``: kernels pass the
    buffer positionally (``nl.ndarray(shape, nl.float32, nl.shared_hbm)``)."""
    loc = user_location()
    t = current()
    b = _as_buffer(buffer)
    shape = tuple(int(s) if not isinstance(s, par_dim) else s for s in _shape_tuple(shape))
    pdim = _partition_dim(shape)
    if b.space == HBM:
        if b.shared:
            key = t.shared_counter
            t.shared_counter += 1
            buf = t.shared.get(key)
            if buf is None or buf.shape != tuple(int(s) for s in shape):
                buf = t.new_buffer(HBM, dtype, shape, name, loc, kind="scratch")
                t.shared[key] = buf
        else:
            buf = t.new_buffer(HBM, dtype, shape, name, loc, kind="scratch")
        return View.contiguous(buf)
    if pdim:
        # Leading block dims: each block is a [partition, free...] tile.
        p = int(shape[pdim])
        if p > _tr.PMAX:
            raise error(
                f"partition dimension {p} exceeds the {_tr.PMAX} partitions of {b.name.upper()}",
                "partition-dim",
                loc,
            )
        buf = t.new_buffer(
            b.space,
            dtype,
            (p,) + tuple(int(s) for s in shape[:pdim]) + tuple(int(s) for s in shape[pdim + 1 :]),
            name,
            loc,
        )
        # Stored partition-major; the view presents the declared order.
        buf_view = View.contiguous(buf)
        order = [pdim] + [i for i in range(len(shape)) if i != pdim]
        strides = [0] * len(shape)
        for pos, axis in enumerate(order):
            strides[axis] = buf_view.strides[pos]
        _view.note_handle(t, buf)
        return View(buf, 0, tuple(int(s) for s in shape), tuple(strides))
    buf = t.new_buffer(b.space, dtype, shape, name, loc)
    _view.note_handle(t, buf)
    return View.contiguous(buf)


def _shape_tuple(shape) -> tuple:
    if isinstance(shape, int):
        return (shape,)
    return tuple(shape)


def full(shape, fill_value, dtype, *, buffer=None, name: str = "", **kwargs) -> View:
    v = ndarray(shape, dtype, buffer=buffer, name=name)
    _memset(v, fill_value, user_location())
    return v


def zeros(shape, dtype, *, buffer=None, name: str = "", **kwargs) -> View:
    v = ndarray(shape, dtype, buffer=buffer, name=name)
    loc = user_location()
    if v.buf.space == PSUM:
        v.buf.pending_zero = loc  # emitted at first use, or folded into a matmul
    else:
        _memset(v, 0.0, loc)
    return v


def ones(shape, dtype, *, buffer=None, name: str = "", **kwargs) -> View:
    v = ndarray(shape, dtype, buffer=buffer, name=name)
    _memset(v, 1.0, user_location())
    return v


def zeros_like(a, dtype=None, *, buffer=None, name: str = "", **kwargs) -> View:
    return zeros(
        a.shape, dtype or a.dtype, buffer=buffer or _buffer_for_space(a.buf.space), name=name
    )


def ones_like(a, dtype=None, *, buffer=None, name: str = "", **kwargs) -> View:
    return ones(
        a.shape, dtype or a.dtype, buffer=buffer or _buffer_for_space(a.buf.space), name=name
    )


def full_like(a, fill_value, dtype=None, *, buffer=None, name: str = "", **kwargs) -> View:
    return full(
        a.shape,
        fill_value,
        dtype or a.dtype,
        buffer=buffer or _buffer_for_space(a.buf.space),
        name=name,
    )


def empty_like(a, dtype=None, *, buffer=None, name: str = "", **kwargs) -> View:
    return ndarray(
        a.shape, dtype or a.dtype, buffer=buffer or _buffer_for_space(a.buf.space), name=name
    )


def _memset(v: View, value, loc) -> None:
    if v.buf.space == HBM:
        # HBM has no engine of its own: fill a tile and DMA it out, row
        # block by row block.
        tmp_shape = (_py.min(v.shape[0], _tr.PMAX),) + tuple(v.shape[1:]) if v.ndim else (1,)
        tile = ndarray(tmp_shape, v.dtype)
        _emit("memset", "gpsimd", tile, (), imm=(float(value),), loc=loc)
        for r in range(0, v.shape[0] if v.ndim else 1, _tr.PMAX):
            n = _py.min(_tr.PMAX, v.shape[0] - r)
            _emit("copy", "dma", v[r : r + n] if v.ndim else v, [tile[0:n]], loc=loc)
        return
    _emit("memset", "vector", v, (), imm=(float(value),), loc=loc)


# Emission ------------------------------------------------------------------
def _sub_expr(e: Expr, lo, hi) -> Expr:
    shape = tuple(h - a + 1 for a, h in zip(lo, hi, strict=False))
    e = e.broadcast_to(tuple(h + 1 for h in hi)) if e.ndim < len(lo) else e
    return Expr(shape, e.base + _py.sum(c * a for c, a in zip(e.coef, lo, strict=False)), e.coef)


def _emit(op, engine, dst: View, srcs=(), mask=None, loc=None, oob_skip=False, **kw):
    """Emits an element-wise-shaped instruction (every source has the
    destination's shape), restricted to the positions `mask` keeps."""
    loc = loc or user_location()
    shape = dst.shape
    box = _indexing.mask_box(mask, shape, loc)
    if box is None:
        return None
    if oob_skip:
        for v in (dst, *srcs):
            if isinstance(v, View) and box is not None:
                box = v.clip_box(*box)
        if box is None:
            return None
    lo, hi = box
    if any(a != 0 for a in lo) or any(h != s - 1 for h, s in zip(hi, shape, strict=False)):
        dst = dst.sub(lo, hi)
        srcs = [
            s.sub(lo, hi)
            if isinstance(s, View)
            else (_sub_expr(s, lo, hi) if isinstance(s, Expr) else s)
            for s in srcs
        ]
    dst.verify(loc=loc)
    for s in srcs:
        if isinstance(s, View):
            s.verify(loc=loc)
    return current().emit(op, engine, dst, srcs, loc=loc, oob_skip=oob_skip, **kw)


def _tile_shape(a: tuple, b: tuple) -> tuple:
    """Broadcast shape of two tiles: partition dims aligned (a reduced
    (P,) tile broadcasts against (P, F) as (P, 1))."""
    n = _py.max(len(a), len(b))
    a = tuple(a) + (1,) * (n - len(a))
    b = tuple(b) + (1,) * (n - len(b))
    out = []
    for x, y in zip(a, b, strict=False):
        if x != y and x != 1 and y != 1:
            raise error(f"tile shapes {list(a)} and {list(b)} do not broadcast", "shape")
        out.append(y if x == 1 else x)
    return tuple(out)


def _bcast(v: View, shape: tuple) -> View:
    if v.shape == tuple(shape):
        return v
    if v.ndim < len(shape):
        v.static_only("broadcasting")
        pad = len(shape) - v.ndim
        v = View(v.buf, v.offset, v.shape + (1,) * pad, v.strides + (0,) * pad, v.checks)
    return v.broadcast_to(shape)


def _is_scalar(x) -> bool:
    return isinstance(x, (int, float, _py.bool, np.number)) and not isinstance(x, View)


def _on_chip(x, what: str, loc) -> View:
    current()
    if isinstance(x, _dynamic_index.IndirectView):
        raise x.unsupported(f"{what} reading", loc)
    if not isinstance(x, View):
        raise error(f"{what} expects a tile, got {type(x).__name__}", "operand", loc)
    if x.buf.space == HBM:
        raise error(
            f"{what} operates on tiles in SBUF or PSUM, but its operand is in HBM "
            "(load it first with nl.load)",
            "buffer",
            loc,
        )
    return x


def _static_operand(x, what: str, name: str, loc) -> View:
    """An instruction's SBUF/PSUM operand ``what`` of ``name``: required,
    statically indexed and in bounds."""
    if x is None:
        raise error(f"{name}: {what} is required", "operand", loc)
    v = _on_chip(x, f"{name} {what}", loc)
    v.static_only(f"{name} {what}", loc)
    v.verify(loc=loc)
    return v


def _new_tile(shape, dtype, loc, space=SBUF) -> View:
    t = current()
    if not shape:
        shape = (1,)
    return View.contiguous(t.new_buffer(space, dtype, shape, "", loc))


def _result_dtype(dtype, *operands):
    if dtype is not None:
        return _dt.as_dtype(dtype)
    tiles = [o.dtype for o in operands if isinstance(o, View)]
    if not tiles:
        return float32
    d = tiles[0]
    for o in tiles[1:]:
        d = _dt.promote(d, o)
    for o in operands:
        if isinstance(o, float) and not d.is_float:
            d = float32
    return d


# ALU operations and activation functions: the simulator's codes, by NKI's
# names (layout.py reads them from the C++ runtime). numpy ufuncs are
# accepted wherever NKI takes an op (the samples pass np.add).
ALU = _layout.ALU
ACT = _layout.ACT
_SCALAR_ENGINE_ACTS = {
    "exp",
    "log",
    "tanh",
    "sigmoid",
    "relu",
    "gelu",
    "gelu_apprx_tanh",
    "silu",
    "sqrt",
    "rsqrt",
    "square",
    "sin",
    "cos",
    "erf",
    "softplus",
    "mish",
    "arctan",
    "exp2",
    "log2",
    "tan",
    "gelu_dx",
    "silu_dx",
    "copy",
}


def _alu_code(op, loc=None) -> int:
    name = _op_name(op)
    if name in ("max", "amax"):
        name = "maximum"
    if name in ("min", "amin"):
        name = "minimum"
    if name in ("true_divide",):
        name = "divide"
    if name in ("sum",):
        name = "add"
    if name in ("prod",):
        name = "multiply"
    if name in ("mod", "remainder"):
        name = "fmod"
    if name not in ALU:
        raise error(f"{name!r} is not an ALU operation of the Vector engine", "op", loc)
    return ALU[name]


def _act_code(op, loc=None) -> int:
    name = _op_name(op)
    name = {
        "gelu_apprx_sigmoid": "gelu_apprx_tanh",
        "identity": "copy",
        "bypass": "copy",
        "invert": None,
    }.get(name, name)
    if name not in ACT:
        raise error(
            f"{_op_name(op)!r} is not an activation function of the Scalar engine", "op", loc
        )
    return ACT[name]


def _op_name(op) -> str:
    if isinstance(op, str):
        return op
    name = getattr(op, "__name__", None) or getattr(op, "name", None)
    if name is None:
        raise error(f"{op!r} is not an NKI operation", "op")
    return {"absolute": "abs", "fabs": "abs"}.get(name, name)


# Data movement ---------------------------------------------------------------
def load(src, *, mask=None, dtype=None, **kwargs) -> View:
    """Loads an HBM tensor (view) into a new SBUF tile."""
    current()
    loc = user_location()
    if not isinstance(src, View):
        raise error(f"nl.load expects a kernel tensor, got {type(src).__name__}", "operand", loc)
    out = _new_tile(src.shape, dtype or src.dtype, loc)
    engine = "dma" if src.buf.space == HBM else "vector"
    _emit("copy", engine, out, [src], mask=mask, loc=loc)
    return out


def store(dst, value, *, mask=None, **kwargs) -> None:
    """Stores a tile (or a scalar) into an HBM tensor (view)."""
    current()
    loc = user_location()
    if not isinstance(dst, View):
        raise error(f"nl.store expects a kernel tensor, got {type(dst).__name__}", "operand", loc)
    if _is_scalar(value):
        tile = _new_tile(dst.shape, dst.dtype, loc)
        _emit("memset", "vector", tile, (), imm=(float(value),), loc=loc)
        value = tile
    if not isinstance(value, View):
        raise error(f"nl.store stores a tile, got {type(value).__name__}", "operand", loc)
    if value.shape != dst.shape and value.size == dst.size and value.covers_buffer():
        value = value.reshape(dst.shape)  # same elements, another shape
    _emit("copy", "dma", dst, [_bcast(value, dst.shape)], mask=mask, loc=loc)


def load_transpose2d(src, *, mask=None, dtype=None, **kwargs) -> View:
    loc = user_location()
    if not isinstance(src, View) or src.ndim != 2:
        raise error("nl.load_transpose2d loads a 2-D tensor", "shape", loc)
    src.static_only("nl.load_transpose2d", loc)
    out = _new_tile((src.shape[1], src.shape[0]), dtype or src.dtype, loc)
    t = View(
        src.buf,
        src.offset,
        (src.shape[1], src.shape[0]),
        (src.strides[1], src.strides[0]),
        src.checks and (),
    )
    src.verify(loc=loc)
    _emit("copy", "dma", out, [t], mask=mask, loc=loc)
    return out


def copy(src, *, mask=None, dtype=None, **kwargs) -> View:
    loc = user_location()
    if _is_scalar(src):
        raise error("nl.copy copies a tile", "operand", loc)
    src = _on_chip(src, "nl.copy", loc)
    out = _new_tile(src.shape, dtype or src.dtype, loc)
    _emit("copy", "vector", out, [src], mask=mask, loc=loc)
    return out


def _assign(target: View, value, loc=None) -> None:
    """``target[...] = value``."""
    loc = loc or user_location()
    if isinstance(value, View):
        if _same_access(target, value):
            return
        if current().retarget_last(value, target):
            return
        engine = "dma" if HBM in (target.buf.space, value.buf.space) else "vector"
        _emit("copy", engine, target, [_bcast(value, target.shape)], loc=loc)
    elif isinstance(value, Expr):
        _emit("iota", "gpsimd", target, [value.broadcast_to(target.shape)], loc=loc)
    elif _is_scalar(value):
        _memset(target, value, loc)
    else:
        raise error(f"cannot assign a {type(value).__name__} to a tile", "operand", loc)


def _accumulate(target: View, value, op: str) -> None:
    """``target[...] += value`` (and -=, *=). A matmul result added into
    PSUM accumulates in place, as the Tensor engine does."""
    loc = user_location()
    if op == "add" and isinstance(value, View) and target.buf.space == PSUM:
        if current().retarget_last(value, target, accumulate=True):
            return
    fn = {"add": add, "subtract": subtract, "multiply": multiply}[op]
    result = _binary(fn.__name__, target, value, target.dtype, None, loc)
    _assign(target, result, loc)


def _same_access(a: View, b: View) -> bool:
    return a.buf is b.buf and a.offset == b.offset and a.shape == b.shape and a.strides == b.strides


# Element-wise ----------------------------------------------------------------
_COMPARISONS = {
    "equal",
    "not_equal",
    "greater",
    "greater_equal",
    "less",
    "less_equal",
    "logical_and",
    "logical_or",
    "logical_xor",
}


def _binary(name, x, y, dtype, mask, loc=None):
    loc = loc or user_location()
    if _is_scalar(x) and _is_scalar(y):
        return getattr(np, {"fmod": "fmod", "power": "power"}.get(name, name))(x, y)
    if name in _COMPARISONS and dtype is None:
        dtype = bool_  # NKI's default for comparisons and logical ops
    code = ALU[name]
    if _is_scalar(x) or _is_scalar(y):
        tile, scalar, reverse = (y, x, True) if _is_scalar(x) else (x, y, False)
        tile = _on_chip(tile, f"nl.{name}", loc)
        out = _new_tile(tile.shape, _result_dtype(dtype, tile, scalar), loc)
        flags = (
            _tr.FLAG_OPERAND0_IMM | _tr.FLAG_OPERAND1_IMM | (_tr.FLAG_REVERSE0 if reverse else 0)
        )
        _emit(
            "tensor_scalar",
            "vector",
            out,
            [tile],
            mask=mask,
            loc=loc,
            alu0=code,
            flags=flags,
            imm=(float(scalar), 0.0),
        )
        return out
    x = _on_chip(x, f"nl.{name}", loc)
    y = _on_chip(y, f"nl.{name}", loc)
    shape = _tile_shape(x.shape, y.shape)
    out = _new_tile(shape, _result_dtype(dtype, x, y), loc)
    engine = "gpsimd" if name == "power" else "vector"
    _emit(
        "tensor_tensor",
        engine,
        out,
        [_bcast(x, shape), _bcast(y, shape)],
        mask=mask,
        loc=loc,
        alu0=code,
    )
    return out


def _unary(name, x, dtype, mask, loc=None, engine=None):
    loc = loc or user_location()
    if _is_scalar(x):
        return _np_unary(name, x)
    x = _on_chip(x, f"nl.{name}", loc)
    out = _new_tile(x.shape, _result_dtype(dtype, x), loc)
    engine = engine or ("scalar" if name in _SCALAR_ENGINE_ACTS else "vector")
    _emit(
        "activation",
        engine,
        out,
        [x],
        mask=mask,
        loc=loc,
        act=ACT[name],
        flags=_tr.FLAG_OPERAND0_IMM | _tr.FLAG_OPERAND1_IMM,
        imm=(1.0, 0.0),
    )
    return out


def _np_unary(name, x):
    import math as m

    f = {
        "exp": m.exp,
        "log": m.log,
        "sqrt": m.sqrt,
        "rsqrt": lambda v: 1 / m.sqrt(v),
        "reciprocal": lambda v: 1 / v,
        "square": lambda v: v * v,
        "abs": abs,
        "negative": lambda v: -v,
        "tanh": m.tanh,
        "sin": m.sin,
        "cos": m.cos,
    }.get(name)
    if f is None:
        raise error(f"nl.{name} of a Python number", "operand")
    return f(x)


def _make_binary(name):
    def fn(x, y, *, dtype=None, mask=None, **kwargs):
        return _binary(name, x, y, dtype, mask)

    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = f"Element-wise {name} of two tiles (or a tile and a scalar), with broadcasting."
    return fn


def _make_unary(name):
    def fn(x, *, dtype=None, mask=None, **kwargs):
        return _unary(name, x, dtype, mask)

    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = f"Element-wise {name} of a tile."
    return fn


add = _make_binary("add")
subtract = _make_binary("subtract")
multiply = _make_binary("multiply")
divide = _make_binary("divide")
maximum = _make_binary("maximum")
minimum = _make_binary("minimum")
power = _make_binary("power")
fmod = _make_binary("fmod")
mod = fmod
equal = _make_binary("equal")
not_equal = _make_binary("not_equal")
greater = _make_binary("greater")
greater_equal = _make_binary("greater_equal")
less = _make_binary("less")
less_equal = _make_binary("less_equal")
logical_and = _make_binary("logical_and")
logical_or = _make_binary("logical_or")
logical_xor = _make_binary("logical_xor")
bitwise_and = _make_binary("bitwise_and")
bitwise_or = _make_binary("bitwise_or")
bitwise_xor = _make_binary("bitwise_xor")
left_shift = _make_binary("left_shift")
right_shift = _make_binary("right_shift")
abs_max = _make_binary("abs_max")

exp = _make_unary("exp")
log = _make_unary("log")
tanh = _make_unary("tanh")
sigmoid = _make_unary("sigmoid")
relu = _make_unary("relu")
gelu = _make_unary("gelu")
gelu_apprx_tanh = _make_unary("gelu_apprx_tanh")
gelu_apprx_sigmoid = gelu_apprx_tanh
gelu_dx = _make_unary("gelu_dx")
silu = _make_unary("silu")
silu_dx = _make_unary("silu_dx")
sqrt = _make_unary("sqrt")
rsqrt = _make_unary("rsqrt")
reciprocal = _make_unary("reciprocal")
square = _make_unary("square")
abs = _make_unary("abs")  # noqa: A001
negative = _make_unary("negative")
sign = _make_unary("sign")
sin = _make_unary("sin")
cos = _make_unary("cos")
tan = _make_unary("tan")
erf = _make_unary("erf")
softplus = _make_unary("softplus")
mish = _make_unary("mish")
arctan = _make_unary("arctan")
ceil = _make_unary("ceil")
floor = _make_unary("floor")
trunc = _make_unary("trunc")
exp2 = _make_unary("exp2")
log2 = _make_unary("log2")


def bypass(x, *, dtype=None, mask=None, **kwargs):
    return copy(x, dtype=dtype, mask=mask)


def erf_dx(x, *, dtype=None, mask=None, **kwargs):
    # d/dx erf(x) = 2/sqrt(pi) * exp(-x^2)
    loc = user_location()
    sq = _unary("square", x, float32, mask, loc)
    e = _activation_fn(ACT["exp"], sq, scale=-1.0, loc=loc)
    return _binary("multiply", e, 2.0 / math.sqrt(math.pi), dtype or x.dtype, mask, loc)


def logical_not(x, *, dtype=None, mask=None, **kwargs):
    return _binary("equal", x, 0.0, dtype, mask)


def invert(x, *, dtype=None, mask=None, **kwargs):
    return _binary("bitwise_xor", x, -1, dtype, mask)


def _activation_fn(code, x, scale=1.0, bias=None, dtype=None, loc=None, engine="scalar"):
    out = _new_tile(x.shape, dtype or x.dtype, loc)
    _emit(
        "activation",
        engine,
        out,
        [x],
        loc=loc,
        act=code,
        flags=_tr.FLAG_OPERAND0_IMM | _tr.FLAG_OPERAND1_IMM,
        imm=(float(scale), 0.0),
    )
    return out


def where(condition, x, y, *, dtype=None, mask=None, **kwargs):
    loc = user_location()
    condition = _on_chip(condition, "nl.where", loc)
    shape = condition.shape
    for v in (x, y):
        if isinstance(v, View):
            shape = _tile_shape(shape, v.shape)
    out_dtype = _result_dtype(dtype, x, y)

    def materialise(v):
        if isinstance(v, View):
            return _bcast(_on_chip(v, "nl.where", loc), shape)
        t = _new_tile(shape, out_dtype, loc)
        _emit("memset", "vector", t, (), imm=(float(v),), loc=loc)
        return t

    xs, ys = materialise(x), materialise(y)
    out = _new_tile(shape, out_dtype, loc)
    _emit("select", "vector", out, [_bcast(condition, shape), xs, ys], mask=mask, loc=loc)
    return out


# Reductions ---------------------------------------------------------------
def _axes(axis, ndim, loc):
    if axis is None:
        axes = list(range(1, ndim))
    elif isinstance(axis, (list, tuple)):
        axes = [int(a) for a in axis]
    else:
        axes = [int(axis)]
    axes = sorted({a + ndim if a < 0 else a for a in axes})
    for a in axes:
        if not 0 <= a < ndim:
            raise error(
                f"reduction axis {a} is out of range for a tile of rank {ndim}", "axis", loc
            )
    return axes


def _reduce(
    alu: int, x, axis, dtype, mask, keepdims, negate=False, loc=None, engine="vector", into=None
):
    """Reduces the free axes `axis` of a tile; a mask restricts the elements
    reduced and the result positions written (the rest stay undefined).
    `into`: an on-chip tile of the result's shape (the reduced dims kept or
    not) to reduce straight into, as ``nisa.tensor_reduce(dst=...)`` does;
    otherwise (or when its shape is neither) the result is a new tile."""
    loc = loc or user_location()
    x = _on_chip(x, "reduction", loc)
    axes = _axes(axis, x.ndim, loc)
    kept = [d for d in range(x.ndim) if d not in axes]
    kept_shape = tuple(1 if d in axes else s for d, s in enumerate(x.shape))
    if (
        into is not None
        and into.buf.space != HBM
        and into.buf is not x.buf
        and into.dtype == (dtype or x.dtype)
    ):
        if into.shape == kept_shape:
            keepdims = True
        elif into.shape == tuple(x.shape[d] for d in kept):
            keepdims = False
        else:
            into = None
    else:
        into = None
    out_shape = kept_shape if keepdims else tuple(x.shape[d] for d in kept)
    out = into if into is not None else _new_tile(out_shape, dtype or x.dtype, loc)
    box = _indexing.mask_box(mask, x.shape, loc)
    if box is None:
        return out
    lo, hi = box
    xs = x.sub(lo, hi)
    xs.verify(loc=loc)
    order = kept + axes
    src = View(
        xs.buf, xs.offset, tuple(xs.shape[d] for d in order), tuple(xs.strides[d] for d in order)
    )
    # The destination: the kept positions of the box.
    if keepdims:
        kept_strides = tuple(out.strides[d] for d in kept)
    else:
        kept_strides = out.strides if out.shape == tuple(x.shape[d] for d in kept) else ()
    dst_offset = out.offset + _py.sum(lo[d] * st for d, st in zip(kept, kept_strides, strict=False))
    dst = View(out.buf, dst_offset, tuple(xs.shape[d] for d in kept), kept_strides)
    if not kept:
        dst = View(out.buf, out.offset, (), ())
    current().emit(
        "reduce",
        engine,
        dst,
        [src],
        alu0=alu,
        keep=len(kept),
        flags=_tr.FLAG_NEGATE if negate else 0,
        loc=loc,
    )
    if dst.covers_buffer() or (not kept and out.covers_buffer()):
        out.buf.producer = current().ninstr - 1
    return out


def sum(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):  # noqa: A001
    return _reduce(ALU["add"], x, axis, dtype, mask, keepdims)


def prod(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    return _reduce(ALU["multiply"], x, axis, dtype, mask, keepdims)


def max(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):  # noqa: A001
    return _reduce(ALU["maximum"], x, axis, dtype, mask, keepdims)


def min(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):  # noqa: A001
    return _reduce(ALU["minimum"], x, axis, dtype, mask, keepdims)


def all(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):  # noqa: A001
    return _reduce(ALU["logical_and"], x, axis, dtype, mask, keepdims)


def mean(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    loc = user_location()
    x = _on_chip(x, "nl.mean", loc)
    d = dtype or (x.dtype if x.dtype.is_float else float32)
    axes = _axes(axis, x.ndim, loc)
    box = _indexing.mask_box(mask, x.shape, loc)
    count = math.prod(box[1][a] - box[0][a] + 1 for a in axes) if box else 1
    s = _reduce(ALU["add"], x, axis, float32, mask, keepdims, loc=loc)
    out = _new_tile(s.shape, d, loc)
    _emit(
        "tensor_scalar",
        "vector",
        out,
        [s],
        loc=loc,
        alu0=ALU["multiply"],
        flags=_tr.FLAG_OPERAND0_IMM | _tr.FLAG_OPERAND1_IMM,
        imm=(1.0 / count, 0.0),
    )
    return out


def var(x, axis, *, dtype=None, mask=None, **kwargs):
    loc = user_location()
    m = mean(x, axis, mask=mask, keepdims=True, dtype=float32)
    d = _binary("subtract", x, m, float32, mask, loc)
    return mean(_unary("square", d, float32, mask, loc), axis, dtype=dtype, mask=mask)


# Matmul, transpose, softmax ------------------------------------------------
def _to_sbuf(x: View, loc) -> View:
    if x.buf.space == SBUF:
        return x
    t = _new_tile(x.shape, x.dtype, loc)
    _emit("copy", "vector", t, [x], loc=loc)
    return t


def _matmul(stationary: View, moving: View, loc, mask=None) -> View:
    """Tensor engine: stationary[K, M]^T @ moving[K, N] -> PSUM fp32 [M, N]."""
    st = _on_chip(stationary, "matmul", loc)
    mv = _on_chip(moving, "matmul", loc)
    st, mv = _flatten_free(st, loc), _flatten_free(mv, loc)
    K, M = st.shape
    K2, N = mv.shape
    if K != K2:
        raise error(
            f"matmul contraction sizes differ: stationary has {K} partitions, moving {K2}",
            "matmul-shape",
            loc,
        )
    if K > _tr.PMAX:
        raise error(
            f"matmul contraction (partition) size {K} exceeds {_tr.PMAX}", "matmul-limit", loc
        )
    if M > tile_size.gemm_stationary_fmax:
        raise error(
            f"matmul stationary free size {M} exceeds "
            f"{tile_size.gemm_stationary_fmax} (nl.tile_size.gemm_stationary_fmax)",
            "matmul-limit",
            loc,
        )
    if N > tile_size.gemm_moving_fmax:
        raise error(
            f"matmul moving free size {N} exceeds {tile_size.gemm_moving_fmax} "
            "(nl.tile_size.gemm_moving_fmax)",
            "matmul-limit",
            loc,
        )
    if (st.dtype == float32) != (mv.dtype == float32):
        raise error(
            f"matmul operands {st.dtype.name} and {mv.dtype.name}: if one is fp32 both must be",
            "matmul-dtype",
            loc,
        )
    if not st.dtype.is_float or not mv.dtype.is_float:
        raise error("matmul operands must be floating point", "matmul-dtype", loc)
    st, mv = _to_sbuf(st, loc), _to_sbuf(mv, loc)
    out = _new_tile((M, N), float32, loc, PSUM)
    st.verify(loc=loc)
    mv.verify(loc=loc)
    current().emit("matmul", "tensor", out, [st, mv], loc=loc)
    return out


def _flatten_free(v: View, loc) -> View:
    if v.ndim == 2:
        return v
    v.static_only("flattening", loc)
    if v.ndim == 1:
        return View(v.buf, v.offset, (v.shape[0], 1), (v.strides[0], 1), v.checks)
    # Merge the free dims when they are contiguous with each other.
    size, stride = v.shape[-1], v.strides[-1]
    for s, t in zip(reversed(v.shape[1:-1]), reversed(v.strides[1:-1]), strict=False):
        if t != size * stride and s != 1:
            raise error("matmul operands need contiguous free dimensions", "matmul-shape", loc)
        size *= s
    v.verify(loc=loc)
    return View(v.buf, v.offset, (v.shape[0], size), (v.strides[0], stride))


def matmul(x, y, *, transpose_x=False, mask=None, **kwargs) -> View:
    """``x @ y`` on the Tensor engine into PSUM (fp32). ``x`` is [M, K]
    (or [K, M] with transpose_x=True), ``y`` is [K, N]."""
    loc = user_location()
    x = _on_chip(x, "nl.matmul", loc)
    if not transpose_x:
        x = _to_sbuf(_transpose_pe(x, None, loc), loc)
    return _matmul(x, y, loc)


def _transpose_pe(x: View, dtype, loc) -> View:
    x = _flatten_free(_on_chip(x, "transpose", loc), loc)
    P, F = x.shape
    if P > _tr.PMAX or F > _tr.PMAX:
        raise error(
            f"a Tensor-engine transpose takes at most [128, 128], got {[P, F]}",
            "transpose-limit",
            loc,
        )
    out = _new_tile((F, P), dtype or x.dtype, loc, PSUM)
    x.verify(loc=loc)
    current().emit("transpose", "tensor", out, [x], loc=loc)
    return out


def transpose(x, *, dtype=None, mask=None, **kwargs) -> View:
    return _transpose_pe(x, dtype, user_location())


def softmax(x, axis, *, dtype=None, compute_dtype=None, mask=None, **kwargs) -> View:
    loc = user_location()
    x = _on_chip(x, "nl.softmax", loc)
    axes = _axes(axis, x.ndim, loc)
    neg_max = _reduce(ALU["maximum"], x, axes, float32, mask, True, negate=True, loc=loc)
    shifted = _binary("add", x, neg_max, float32, mask, loc)
    e = _unary("exp", shifted, float32, mask, loc)
    s = _reduce(ALU["add"], e, axes, float32, mask, True, loc=loc)
    r = _unary("reciprocal", s, float32, None, loc, engine="vector")
    return _binary("multiply", e, r, dtype or x.dtype, mask, loc)


def broadcast_to(src, *, shape=None, **kwargs) -> View:
    if shape is None:
        shape = kwargs.get("shape")
    return src.broadcast_to(tuple(shape))


def expand_dims(data, axis) -> View:
    data.static_only("nl.expand_dims")
    axis = axis if axis >= 0 else data.ndim + 1 + axis
    shape = data.shape[:axis] + (1,) + data.shape[axis:]
    strides = data.strides[:axis] + (0,) + data.strides[axis:]
    return View(data.buf, data.offset, shape, strides, data.checks and ())


def static_cast(x, dtype):
    """Host-side cast of a NumPy array (used by tests around kernels)."""
    return np.asarray(x).astype(_dt.numpy_dtype(_dt.as_dtype(dtype)))


# Loops and SPMD -------------------------------------------------------------
def affine_range(start, stop=None, step=1, **kwargs):
    """A loop without carried dependencies (the trace unrolls it)."""
    if stop is None:
        return _py.range(int(start))
    return _py.range(int(start), int(stop), int(step))


def sequential_range(start, stop=None, step=1, **kwargs):
    return affine_range(start, stop, step)


def static_range(start, stop=None, step=1, **kwargs):
    return affine_range(start, stop, step)


def _grid_axis(t, axis, what: str) -> int:
    ndim = _py.max(len(t.grid), 1)
    if isinstance(axis, _py.bool) or not isinstance(axis, (int, np.integer)):
        raise error(f"{what}: the axis is an integer, got {axis!r}", "grid")
    a = int(axis)
    if not 0 <= a < ndim:
        raise error(f"{what}({axis}): the launch grid has {len(t.grid)} dimensions", "grid")
    return a


def program_id(axis=0) -> int:
    """Index of this instance along `axis` of the launch grid (an
    ``nl.spmd_dim(n, nl.nc(k))`` axis counts all n·k instances)."""
    t = current()
    a = _grid_axis(t, axis, "program_id")
    return t.program_id[a] if t.grid else 0


def num_programs(axes=None):
    """Instances along `axes` (an axis or a tuple of them); all of them
    when `axes` is None."""
    t = current()
    grid = t.grid or (1,)
    if axes is None:
        return math.prod(grid)
    if isinstance(axes, (tuple, list)):
        return tuple(grid[_grid_axis(t, a, "num_programs")] for a in axes)
    return grid[_grid_axis(t, axes, "num_programs")]


def program_ndim() -> int:
    return len(current().grid)


def device_print(prefix, x, *, mask=None, **kwargs) -> None:
    """Prints a tile's values when the kernel runs (after it completes)."""
    loc = user_location()
    t = current()
    if not isinstance(x, View):
        t.prints.append((str(prefix), x, None))
        return
    out = t.new_buffer(HBM, x.dtype, x.shape or (1,), f"device_print {prefix}", loc, kind="print")
    _emit("copy", "dma", View.contiguous(out), [x], mask=mask, loc=loc)
    t.prints.append((str(prefix), None, out))


def _unsupported(name):
    def fn(*args, **kwargs):
        raise NKIError(f"nl.{name} is not supported by the torch-neuronx simulator yet")

    fn.__name__ = name
    return fn


from . import random_numbers as _random_numbers  # noqa: E402
from .random_numbers import language_dropout as dropout  # noqa: E402, F401
from .random_numbers import rand, random_seed  # noqa: E402, F401

atomic_rmw = _unsupported("atomic_rmw")
gather_flattened = _unsupported("gather_flattened")

from .control_flow import dynamic_range, fori_loop, if_else, while_loop  # noqa: E402, F401
from .shared_constants import shared_constant, shared_identity_matrix  # noqa: E402, F401

__all__ = [n for n in dir() if not n.startswith("_") and n not in ("annotations", "math", "np")]


# View's tile operators are these functions (see view.use_language), and the
# random-number instructions build on them (random_numbers.use_language).
_view.use_language(_sys.modules[__name__])
_random_numbers.use_language(_sys.modules[__name__])


# nl.range (NKI-lib's loops, e.g. mxfp_load): a loop the trace unrolls, as
# affine_range; it returns Python's range, so this module's own uses of the
# name behave as the builtin's.
range = affine_range  # noqa: A001
