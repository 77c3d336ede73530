"""Vector-engine selections and fused reductions: ``nisa.range_select``,
``nisa.select_reduce``, ``nisa.tensor_copy_predicated`` and
``nisa.tensor_scalar_reduce``, in the current destination-first form and the
original tile-returning one (``legacy_*``, ``neuronxcc.nki.isa``).

Each is a short sequence of the simulator's existing records (iota,
tensor_scalar, select, reduce, copy, memset). The engines compute in fp32, as
the hardware's datapath: a reduction is taken over the fp32 results before
they are rounded to the destination's dtype (NKI's range_select page: with a
bf16 ``dst`` its fill value becomes -inf while an fp32 ``reduce_res`` holds
FP32_MIN), so a non-fp32 ``dst`` with a reduction computes into an fp32
scratch tile and copies it out.

Accumulator commands (``reduce_cmd``): ``idle`` and ``reset_reduce`` give
``reduce_res`` this instruction's reduction; ``load_reduce`` (with
``reduce_init``) combines it with the loaded value; ``reset`` and ``reduce``
(carrying the accumulator registers across instructions) are not supported
yet.

Costs, against NKI's published figures (N elements per partition, MIN_II 64
cycles):

- range_select: no figure in the versions of its page available here.
  Here: an iota of the free index (GpSimd, 150 + N), a [P, 1] memset of the
  fill value, two tensor_scalar comparisons and two selects (4 x max(64, N)
  Vector cycles), plus a reduce (and, for a non-fp32 dst, a copy) when
  ``reduce_res`` is given: about four to six times one Vector pass.
- select_reduce: no figure in the versions of its page available here. Here:
  a select (max(64, N)), a [P, 1] memset for a scalar ``on_false``, and a
  reduce pass (max(64, N)) when ``reduce_res`` is given.
- tensor_copy_predicated: NKI's figure (Neuron 2.26 page) is max(64, N) with
  one operand in PSUM, max(64, 2N) with both in SBUF. Here: one select,
  max(64, N), in either case (a memset of a [P, 1] tile first for a scalar
  ``src``).
- tensor_scalar_reduce: NKI's figure is max(64, N) + 64 Vector cycles. Here:
  the tensor_scalar (max(64, N)) and a reduce pass (max(64, N)): N - 64 more
  for N > 64 (and a copy pass more for a non-fp32 dst).
"""

from __future__ import annotations

import math

import numpy as np

from . import dtypes as _dt
from . import language as nl
from . import trace_state as _tr
from .dynamic_index import IndirectView
from .indexing import Expr
from .isa_constants import reduce_cmd as _reduce_cmd
from .tensor_scalar_form import tensor_scalar
from .trace_state import HBM, PSUM, current, error, user_location
from .view import View

FP32_MIN = float(np.finfo(np.float32).min)
_COMPARISONS = ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal")
_BITVEC = (
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "left_shift",
    "right_shift",
    "logical_and",
    "logical_or",
    "logical_xor",
)


# Operands ------------------------------------------------------------------------
def _tile(x, what: str, op: str, loc) -> View:
    if isinstance(x, IndirectView):
        raise x.unsupported(f"{op} {what}", loc)
    if not isinstance(x, View):
        raise error(
            f"{op}: {what} must be an SBUF or PSUM tile, got {type(x).__name__}", "operand", loc
        )
    if x.buf.space == HBM:
        raise error(
            f"{op}: {what} is in HBM; the Vector engine reads and writes SBUF/PSUM tiles "
            "(load it first)",
            "buffer",
            loc,
        )
    x.static_only(f"{op} {what}", loc)
    x.verify(loc=loc)
    return x


def _per_partition(v: View) -> int:
    return math.prod(v.shape[1:])


def _merge(v: View) -> View | None:
    """v as [P, F] when its free dims are one run of equally spaced elements."""
    dims = [(n, s) for n, s in zip(v.shape[1:], v.strides[1:], strict=True) if n != 1]
    size, stride = 1, 1
    for n, s in reversed(dims):
        if size == 1:
            size, stride = n, s
        elif s == size * stride:
            size *= n
        else:
            return None
    return View(v.buf, v.offset, (v.shape[0], size), (v.strides[0], stride))


def _same_layout(ref: View, v: View, what: str, op: str, loc) -> View:
    """v in ref's shape: same partitions and elements per partition, as NKI
    requires; another free shape is accepted when both are contiguous runs."""
    if v.shape == ref.shape:
        return v
    if v.shape[0] != ref.shape[0] or _per_partition(v) != _per_partition(ref):
        raise error(
            f"{op}: {what} {list(v.shape)} must have the partitions and elements per partition "
            f"of {list(ref.shape)}",
            "shape",
            loc,
        )
    m = _merge(v)
    if m is None:
        raise error(
            f"{op}: {what} {list(v.shape)} lays its elements out otherwise than "
            f"{list(ref.shape)} and is not contiguous: not supported yet",
            "shape",
            loc,
        )
    s = m.strides[1]
    strides, acc = [], s
    for n in reversed(ref.shape[1:]):
        strides.append(acc)
        acc *= n
    return View(m.buf, m.offset, ref.shape, (m.strides[0], *reversed(strides)))


def _column(x, ref: View, what: str, op: str, loc) -> View:
    """A [P, 1] tile (one value per partition of ref), broadcast over ref."""
    x = _tile(x, what, op, loc)
    if x.shape[0] != ref.shape[0] or _per_partition(x) != 1:
        raise error(
            f"{op}: {what} {list(x.shape)} must hold one value per partition ([{ref.shape[0]}, 1])",
            "shape",
            loc,
        )
    col = View(
        x.buf,
        x.offset,
        (ref.shape[0],) + (1,) * (ref.ndim - 1),
        (x.strides[0],) + (0,) * (ref.ndim - 1),
    )
    return col.broadcast_to(ref.shape)


def _fill(value, ref: View, dtype, loc) -> View:
    """A [P, 1] tile holding ``value``, broadcast over ref (a select reads
    its operands from memory)."""
    t = nl._new_tile((ref.shape[0], 1), dtype, loc)
    current().emit("memset", "vector", t, (), imm=(float(value),), loc=loc)
    col = View(
        t.buf,
        t.offset,
        (ref.shape[0],) + (1,) * (ref.ndim - 1),
        (t.strides[0],) + (0,) * (ref.ndim - 1),
    )
    return col.broadcast_to(ref.shape)


def _name(op, loc) -> str:
    name = nl._op_name(op)
    return {"max": "maximum", "amax": "maximum", "min": "minimum", "amin": "minimum"}.get(
        name, name
    )


def _reduce_res(res, ref: View, op: str, loc) -> View:
    res = _tile(res, "reduce_res", op, loc)
    if res.shape[0] != ref.shape[0] or _per_partition(res) != 1:
        raise error(
            f"{op}: reduce_res {list(res.shape)} must hold one value per partition of the "
            f"data ([{ref.shape[0]}, 1])",
            "shape",
            loc,
        )
    return res


def _check_cmd(cmd, op: str, loc, has_init: bool):
    try:
        cmd = _reduce_cmd(int(cmd))
    except (TypeError, ValueError):
        raise error(
            f"{op}: reduce_cmd {cmd!r} is not an nki.isa.reduce_cmd", "operand", loc
        ) from None
    if cmd in (_reduce_cmd.reset, _reduce_cmd.reduce):
        raise error(
            f"{op}: reduce_cmd={cmd.name} (accumulating across instructions in the engine's "
            "registers) is not supported yet; use reset_reduce and combine the results",
            "reduce-cmd",
            loc,
        )
    if cmd == _reduce_cmd.load_reduce and not has_init:
        raise error(f"{op}: reduce_cmd=load_reduce needs reduce_init", "reduce-cmd", loc)
    return cmd


def _reduce_into(res: View, values: View, rname: str, loc, negate=False, init=None) -> None:
    """res[p] = rname over the free dims of values[p] (fp32), combined with
    ``init`` (reduce_cmd.load_reduce) and negated if asked."""
    axes = list(range(1, values.ndim))
    direct = init is None
    r = nl._reduce(
        nl.ALU[rname],
        values,
        axes,
        res.dtype if direct else _dt.float32,
        None,
        res.ndim == values.ndim,
        negate=negate and direct,
        loc=loc,
        into=res if direct else None,
    )
    if not direct:
        r = tensor_scalar(
            r,
            rname,
            init if nl._is_scalar(init) else _column(init, r, "reduce_init", "reduce", loc),
            op1=nl.multiply if negate else None,
            operand1=-1.0 if negate else None,
            dtype=res.dtype,
        )
    if r is not res:
        if r.shape != res.shape:
            r = r.reshape(res.shape)
        nl._assign(res, r, loc)


def _psum_pair(a: View, b: View, what: str, op: str, loc) -> None:
    if a.buf.space == PSUM and b.buf.space == PSUM:
        raise error(f"{op}: {what} cannot both be in PSUM", "buffer", loc)


# range_select ---------------------------------------------------------------------
def range_select(
    dst,
    on_true_tile,
    comp_op0,
    comp_op1,
    bound0,
    bound1,
    reduce_cmd=_reduce_cmd.reset_reduce,
    reduce_res=None,
    reduce_op=nl.maximum,
    range_start=0,
    on_false_value=FP32_MIN,
    name=None,
    **kwargs,
) -> None:
    """``dst[p, j] = on_true_tile[p, j]`` where both ``comp_op0(j + range_start,
    bound0[p])`` and ``comp_op1(j + range_start, bound1[p])`` hold (j the free
    index), else ``on_false_value``; ``reduce_res[p] = reduce_op`` over the
    row (NKI's range_select page: https://awsdocs-neuron.readthedocs-hosted.com/
    en/latest/nki/api/generated/nki.isa.range_select.html)."""
    loc = user_location()
    _range_select(
        dst,
        on_true_tile,
        comp_op0,
        comp_op1,
        bound0,
        bound1,
        reduce_cmd,
        reduce_res,
        reduce_op,
        range_start,
        on_false_value,
        loc,
    )


def legacy_range_select(
    *,
    on_true_tile,
    comp_op0,
    comp_op1,
    bound0,
    bound1,
    reduce_cmd=_reduce_cmd.idle,
    reduce_res=None,
    reduce_op=nl.maximum,
    range_start=0,
    on_false_value=FP32_MIN,
    mask=None,
    dtype=None,
    **kwargs,
) -> View:
    loc = user_location()
    x = _tile(on_true_tile, "on_true_tile", "range_select", loc)
    _no_mask(mask, "range_select", loc)
    out = nl._new_tile(x.shape, dtype or x.dtype, loc)
    _range_select(
        out,
        x,
        comp_op0,
        comp_op1,
        bound0,
        bound1,
        reduce_cmd,
        reduce_res,
        reduce_op,
        range_start,
        on_false_value,
        loc,
    )
    return out


def _no_mask(mask, op, loc):
    if mask is not None:
        raise error(f"{op} with a mask is not supported yet", "operand", loc)


def _range_select(
    dst, x, comp_op0, comp_op1, bound0, bound1, cmd, res, reduce_op, start, fill, loc
) -> None:
    op = "range_select"
    current()
    x = _tile(x, "on_true_tile", op, loc)
    dst = _tile(dst, "dst", op, loc)
    dst = _same_layout(x, dst, "dst", op, loc)
    ops = []
    for k, c in enumerate((comp_op0, comp_op1)):
        n = _name(c, loc)
        if n not in _COMPARISONS:
            raise error(
                f"{op}: comp_op{k} must be a comparison ({', '.join(_COMPARISONS)}), got {n}",
                "op",
                loc,
            )
        ops.append(n)
    bounds = []
    for k, b in enumerate((bound0, bound1)):
        bt = _tile(b, f"bound{k}", op, loc)
        if bt.dtype != _dt.float32:
            raise error(
                f"{op}: bound{k} is {bt.dtype.name}; the bounds are float32 tiles",
                "dtype",
                loc,
            )
        bounds.append(_column(bt, x, f"bound{k}", op, loc))
    if not nl._is_scalar(start):
        raise error(f"{op}: range_start must be a number", "operand", loc)
    if not nl._is_scalar(fill):
        raise error(f"{op}: on_false_value must be a number", "operand", loc)
    rname = None
    if res is not None:
        _check_cmd(cmd, op, loc, has_init=False)
        res = _reduce_res(res, x, op, loc)
        rname = _name(reduce_op, loc)
        if rname not in ("maximum", "minimum", "add"):
            raise error(f"{op}: reduce_op must be max, min or add, got {rname}", "op", loc)
    # The free index of every element (j), then each comparison of
    # j + range_start with its bound in one tensor_scalar.
    j = nl._new_tile(x.shape, _dt.float32, loc)
    coef, acc = [], 1
    for n in reversed(x.shape[1:]):
        coef.append(acc)
        acc *= n
    current().emit("iota", "gpsimd", j, [Expr(x.shape, 0, (0, *reversed(coef)))], loc=loc)
    conds = [_compare(j, float(start), ops[k], bounds[k], loc) for k in range(2)]
    # dst = cond1 ? (cond0 ? x : fill) : fill, in fp32 when a reduction
    # reads it and dst is narrower.
    work = dst
    if rname is not None and dst.dtype != _dt.float32:
        work = nl._new_tile(x.shape, _dt.float32, loc)
    fill_t = _fill(fill, x, _dt.float32, loc)
    nl._emit("select", "vector", work, [conds[0], x, fill_t], loc=loc)
    nl._emit("select", "vector", work, [conds[1], work, fill_t], loc=loc)
    if rname is not None:
        _reduce_into(res, work, rname, loc)
        if work is not dst:
            nl._emit("copy", "vector", dst, [work], loc=loc)


def _compare(j: View, start: float, cmp: str, bound: View, loc) -> View:
    out = nl._new_tile(j.shape, _dt.float32, loc)
    current().emit(
        "tensor_scalar",
        "vector",
        out,
        [j, None, bound],
        alu0=nl.ALU["add"],
        alu1=nl.ALU[cmp],
        flags=_tr.FLAG_OPERAND0_IMM,
        imm=(start, 0.0),
        loc=loc,
    )
    return out


# select_reduce --------------------------------------------------------------------
def select_reduce(
    dst,
    predicate,
    on_true,
    on_false,
    reduce_res=None,
    reduce_cmd=_reduce_cmd.idle,
    reduce_op=nl.maximum,
    reverse_pred=False,
    name=None,
    **kwargs,
) -> None:
    """``dst = where(predicate (inverted with reverse_pred), on_true,
    on_false)`` and ``reduce_res = max`` of each row (NKI's select_reduce page:
    https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/
    nki.isa.select_reduce.html)."""
    _select_reduce(
        dst,
        predicate,
        on_true,
        on_false,
        reduce_res,
        reduce_cmd,
        reduce_op,
        reverse_pred,
        user_location(),
    )


def legacy_select_reduce(
    *,
    dst,
    predicate,
    on_true,
    on_false,
    reduce_res=None,
    reduce_cmd=_reduce_cmd.idle,
    reduce_op=nl.maximum,
    reverse_pred=False,
    mask=None,
    dtype=None,
    **kwargs,
):
    loc = user_location()
    _no_mask(mask, "select_reduce", loc)
    _select_reduce(
        dst, predicate, on_true, on_false, reduce_res, reduce_cmd, reduce_op, reverse_pred, loc
    )
    return dst


def _select_reduce(dst, pred, on_true, on_false, res, cmd, reduce_op, reverse, loc) -> None:
    op = "select_reduce"
    current()
    x = _tile(on_true, "on_true", op, loc)
    if x.dtype.name in ("tfloat32", "int32", "uint32"):
        raise error(f"{op}: on_true may not be {x.dtype.name}", "dtype", loc)
    dst = _same_layout(x, _tile(dst, "dst", op, loc), "dst", op, loc)
    p = _same_layout(x, _tile(pred, "predicate", op, loc), "predicate", op, loc)
    if p.dtype.name not in ("int8", "uint8", "int16", "uint16"):
        raise error(
            f"{op}: predicate is {p.dtype.name}; it must be int8, uint8, int16 or uint16",
            "dtype",
            loc,
        )
    _psum_pair(x, p, "on_true and predicate", op, loc)
    if nl._is_scalar(on_false):
        other = None
    else:
        other = _column(on_false, x, "on_false (a scalar or a [P, 1] tile)", op, loc)
    reduces = res is not None
    if reduces:
        _check_cmd(cmd, op, loc, has_init=False)
        res = _reduce_res(res, x, op, loc)
        if not res.dtype.is_float:
            raise error(
                f"{op}: reduce_res must be a float tile, got {res.dtype.name}", "dtype", loc
            )
        if _name(reduce_op, loc) != "maximum":
            raise error(
                f"{op}: reduce_op only supports max, got {_name(reduce_op, loc)}", "op", loc
            )
    if other is None:
        other = _fill(on_false, x, _dt.float32, loc)
    work = dst
    if reduces and dst.dtype != _dt.float32:
        work = nl._new_tile(x.shape, _dt.float32, loc)
    srcs = [p, other, x] if reverse else [p, x, other]
    nl._emit("select", "vector", work, srcs, loc=loc)
    if reduces:
        _reduce_into(res, work, "maximum", loc)
        if work is not dst:
            nl._emit("copy", "vector", dst, [work], loc=loc)


# tensor_copy_predicated -----------------------------------------------------------
def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None, **kwargs) -> None:
    """Copies ``src`` (a tile or a number) into ``dst`` where ``predicate`` is
    nonzero (zero with reverse_pred); elsewhere dst is unmodified (NKI's page:
    https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/
    nki.isa.tensor_copy_predicated.html)."""
    _copy_predicated(dst, src, predicate, reverse_pred, user_location())


def legacy_tensor_copy_predicated(
    *, src, dst, predicate, reverse_pred=False, mask=None, dtype=None, **kwargs
):
    loc = user_location()
    _no_mask(mask, "tensor_copy_predicated", loc)
    _copy_predicated(dst, src, predicate, reverse_pred, loc)
    return dst


def _copy_predicated(dst, src, pred, reverse, loc) -> None:
    op = "tensor_copy_predicated"
    current()
    dst = _tile(dst, "dst", op, loc)
    p = _same_layout(dst, _tile(pred, "predicate", op, loc), "predicate", op, loc)
    if p.dtype.name not in ("uint8", "uint16", "uint32"):
        raise error(
            f"{op}: predicate is {p.dtype.name}; it must be uint8, uint16 or uint32",
            "dtype",
            loc,
        )
    if nl._is_scalar(src):
        if isinstance(src, float) and not dst.dtype.is_float:
            raise error(f"{op}: a float src needs a float dst, got {dst.dtype.name}", "dtype", loc)
        s = _fill(src, dst, dst.dtype, loc)
    else:
        s = _same_layout(dst, _tile(src, "src", op, loc), "src", op, loc)
        if s.dtype != dst.dtype:
            raise error(
                f"{op}: src is {s.dtype.name} and dst {dst.dtype.name}; they must share "
                "the data type",
                "dtype",
                loc,
            )
        _psum_pair(s, p, "src and predicate", op, loc)
    srcs = [p, dst, s] if reverse else [p, s, dst]
    nl._emit("select", "vector", dst, srcs, loc=loc)


# tensor_scalar_reduce -------------------------------------------------------------
def tensor_scalar_reduce(
    dst,
    data,
    op0,
    operand0,
    reduce_op,
    reduce_res=None,
    reverse0=False,
    reduce_cmd=_reduce_cmd.reset_reduce,
    reduce_init=None,
    reduce_res_negate=False,
    name=None,
    **kwargs,
) -> None:
    """``dst = data <op0> operand0`` and ``reduce_res = reduce_op`` over the
    free dims of the result (NKI's page: https://awsdocs-neuron.readthedocs-
    hosted.com/en/latest/nki/api/generated/nki.isa.tensor_scalar_reduce.html)."""
    loc = user_location()
    _scalar_reduce(
        dst,
        data,
        op0,
        operand0,
        reduce_op,
        reduce_res,
        reverse0,
        reduce_cmd,
        reduce_init,
        reduce_res_negate,
        loc,
    )


def legacy_tensor_scalar_reduce(
    *,
    data,
    op0,
    operand0,
    reduce_op,
    reduce_res,
    reverse0=False,
    dtype=None,
    mask=None,
    **kwargs,
) -> View:
    loc = user_location()
    _no_mask(mask, "tensor_scalar_reduce", loc)
    x = _tile(data, "data", "tensor_scalar_reduce", loc)
    out = nl._new_tile(x.shape, dtype or x.dtype, loc)
    _scalar_reduce(
        out, x, op0, operand0, reduce_op, reduce_res, reverse0, _reduce_cmd.idle, None, False, loc
    )
    return out


def _scalar_reduce(dst, data, op0, operand0, reduce_op, res, reverse0, cmd, init, negate, loc):
    op = "tensor_scalar_reduce"
    current()
    x = _tile(data, "data", op, loc)
    dst = _same_layout(x, _tile(dst, "dst", op, loc), "dst", op, loc)
    if x.ndim > 4:
        raise error(f"{op}: data has at most three free dims, got {list(x.shape)}", "shape", loc)
    n0 = _name(op0, loc)
    if n0 in _BITVEC or n0 not in nl.ALU:
        raise error(
            f"{op}: op0 must be an arithmetic operator, got {n0} (bitvec operators are not "
            "supported by this instruction)",
            "op",
            loc,
        )
    rname = _name(reduce_op, loc)
    if rname not in ("add", "subtract", "multiply", "maximum", "minimum"):
        raise error(
            f"{op}: reduce_op must be add, subtract, multiply, max or min, got {rname}",
            "op",
            loc,
        )
    if res is None:
        raise error(f"{op} needs reduce_res", "operand", loc)
    res = _reduce_res(res, x, op, loc)
    cmd = _check_cmd(cmd, op, loc, has_init=init is not None)
    if cmd != _reduce_cmd.load_reduce:
        init = None
    if operand0 is None or not (nl._is_scalar(operand0) or isinstance(operand0, View)):
        raise error(f"{op}: operand0 must be a number or a [P, 1] tile", "operand", loc)
    if isinstance(operand0, View):
        _column(operand0, x, "operand0", op, loc)  # checks its shape
    work = dst if dst.dtype == _dt.float32 else nl._new_tile(x.shape, _dt.float32, loc)
    r = tensor_scalar(x, op0, operand0, reverse0, dtype=work.dtype)
    nl._assign(work, r, loc)
    _reduce_into(res, work, rname, loc, negate=negate, init=init)
    if work is not dst:
        nl._emit("copy", "vector", dst, [work], loc=loc)


__all__ = [
    "range_select",
    "select_reduce",
    "tensor_copy_predicated",
    "tensor_scalar_reduce",
    "legacy_range_select",
    "legacy_select_reduce",
    "legacy_tensor_copy_predicated",
    "legacy_tensor_scalar_reduce",
]
