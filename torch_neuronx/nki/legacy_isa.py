"""``neuronxcc.nki.isa``: the NeuronCore instructions in the original NKI
form, where each call returns a new tile (``c = nisa.nc_matmul(a, b)``).

``nki.isa`` (isa.py) has the current, destination-first form; it is built on
these.
"""

from __future__ import annotations

from . import dtypes as _dt
from . import dynamic_index as _dynamic_index
from . import element_order as _element_order
from . import indexing as _indexing
from . import isa_constants as constants  # noqa: F401 (neuronxcc.nki.isa.constants)
from . import isa_search as _isa_search
from . import language as nl
from . import tensor_scalar_form as _tsf
from . import trace_state as _tr
from .errors import NKIError
from .indexing import Expr, Pred
from .isa_constants import (  # noqa: F401 (nisa.<enum>, as NKI has them)
    dge_mode,
    engine,
    matmul_perf_mode,
    nc_version,
    oob_mode,
    reduce_cmd,
)
from .isa_partition_moves import legacy_local_gather as local_gather  # noqa: F401
from .isa_partition_moves import legacy_nc_stream_shuffle as nc_stream_shuffle  # noqa: F401
from .isa_predicated import legacy_range_select as range_select  # noqa: F401
from .isa_predicated import legacy_select_reduce as select_reduce  # noqa: F401
from .isa_predicated import legacy_tensor_copy_predicated as tensor_copy_predicated  # noqa: F401
from .isa_predicated import legacy_tensor_scalar_reduce as tensor_scalar_reduce  # noqa: F401
from .random_numbers import legacy_dropout as dropout  # noqa: F401
from .tensor_scalar_form import tensor_scalar  # noqa: F401 (nisa.tensor_scalar)
from .trace_state import PSUM, current, error, user_location
from .view import View

unknown_engine = engine.unknown
tensor_engine = engine.tensor
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
vector_engine = engine.vector
dma_engine = engine.dma
sync_engine = engine.sync


def get_nc_version() -> nc_version:
    """The simulated core: NeuronCore-v3 (Trainium2)."""
    return nc_version.gen3


NkiValidationError = NKIError

# The engine an instruction names, and a scalar operand (an immediate or a
# [P, 1] tile): shared with the composite instructions (tensor_scalar_form.py).
_engine = _tsf.engine_name
_imm_or_tile = _tsf.imm_or_tile


# Tensor engine ------------------------------------------------------------------
def nc_matmul(
    stationary,
    moving,
    *,
    is_stationary_onezero=False,
    is_moving_onezero=False,
    is_transpose=False,
    tile_position=(),
    tile_size=(),
    mask=None,
    perf_mode=None,
    **kwargs,
) -> View:
    """stationary[K, M]^T @ moving[K, N] into a new PSUM fp32 tile [M, N]."""
    loc = user_location()
    if is_transpose:
        return nc_transpose(stationary, engine=engine.tensor)
    return nl._matmul(stationary, moving, loc)


def nc_transpose(data, *, mask=None, dtype=None, engine=engine.unknown, **kwargs) -> View:
    loc = user_location()
    if _engine(engine, "tensor") == "vector":
        data = nl._flatten_free(nl._on_chip(data, "nc_transpose", loc), loc)
        P, F = data.shape
        if P > 32 or F > 32:
            raise error(
                f"a Vector-engine transpose takes at most [32, 32], got {[P, F]}",
                "transpose-limit",
                loc,
            )
        out = nl._new_tile((F, P), dtype or data.dtype, loc)
        t = View(data.buf, data.offset, (F, P), (data.strides[1], data.strides[0]))
        data.verify(loc=loc)
        current().emit("copy", "vector", out, [t], loc=loc)
        return out
    return nl._transpose_pe(data, dtype, loc)


# Vector / Scalar / GpSimd ------------------------------------------------------------
def tensor_tensor(
    data1, data2, op, *, dtype=None, mask=None, engine=engine.unknown, **kwargs
) -> View:
    loc = user_location()
    a = nl._on_chip(data1, "tensor_tensor", loc)
    b = nl._on_chip(data2, "tensor_tensor", loc)
    if a.buf.space == PSUM and b.buf.space == PSUM:
        raise error("tensor_tensor cannot read both operands from PSUM", "buffer", loc)
    code = nl._alu_code(op, loc)
    shape = nl._tile_shape(a.shape, b.shape)
    out = nl._new_tile(shape, nl._result_dtype(dtype, a, b), loc)
    default = "gpsimd" if code == nl.ALU["power"] else "vector"
    nl._emit(
        "tensor_tensor",
        _engine(engine, default),
        out,
        [nl._bcast(a, shape), nl._bcast(b, shape)],
        mask=mask,
        loc=loc,
        alu0=code,
    )
    return out


def scalar_tensor_tensor(
    *,
    data,
    op0,
    operand0,
    op1,
    operand1,
    reverse0=False,
    reverse1=False,
    dtype=None,
    mask=None,
    **kwargs,
) -> View:
    tmp = tensor_scalar(data, op0, operand0, reverse0, dtype=_dt.float32, mask=mask)
    if reverse1:
        return tensor_tensor(operand1, tmp, op1, dtype=dtype or data.dtype, mask=mask)
    return tensor_tensor(tmp, operand1, op1, dtype=dtype or data.dtype, mask=mask)


def activation(
    op,
    data,
    *,
    bias=None,
    scale=1.0,
    reduce_op=None,
    reduce_res=None,
    reduce_cmd=reduce_cmd.idle,
    mask=None,
    dtype=None,
    **kwargs,
) -> View:
    """``op(data * scale + bias)`` on the Scalar engine; with ``reduce_res``
    also the sum along the free dims into it."""
    loc = user_location()
    x = nl._on_chip(data, "activation", loc)
    code = nl._act_code(op, loc)
    out = nl._new_tile(x.shape, dtype or x.dtype, loc)
    flags = 0
    srcs = [x, None, None]
    imm = [1.0, 0.0]
    is_imm, v = _imm_or_tile(scale, x.shape, loc)
    if is_imm:
        flags |= _tr.FLAG_OPERAND0_IMM
        imm[0] = v
    else:
        srcs[1] = v
    if bias is None:
        flags |= _tr.FLAG_OPERAND1_IMM
    else:
        is_imm, v = _imm_or_tile(bias, x.shape, loc)
        if is_imm:
            flags |= _tr.FLAG_OPERAND1_IMM
            imm[1] = v
        else:
            srcs[2] = v
    nl._emit(
        "activation", "scalar", out, srcs, mask=mask, loc=loc, act=code, flags=flags, imm=tuple(imm)
    )
    if reduce_res is not None:
        _reduce_into(reduce_res, reduce_op or nl.add, out, mask, loc)
    return out


def activation_reduce(
    op, data, *, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None, **kwargs
) -> View:
    return activation(
        op,
        data,
        bias=bias,
        scale=scale,
        reduce_op=reduce_op,
        reduce_res=reduce_res,
        mask=mask,
        dtype=dtype,
    )


def _reduce_into(res: View, op, x: View, mask, loc) -> None:
    r = nl._reduce(
        nl._alu_code(op, loc),
        x,
        list(range(1, x.ndim)),
        _dt.float32,
        mask,
        True,
        loc=loc,
        engine="scalar",
    )
    nl._assign(res, r.reshape(res.shape) if r.shape != res.shape and r.size == res.size else r, loc)


def tensor_reduce(
    op, data, axis, *, mask=None, dtype=None, negate=False, keepdims=False, **kwargs
) -> View:
    loc = user_location()
    return nl._reduce(
        nl._alu_code(op, loc), data, axis, dtype, mask, keepdims, negate=negate, loc=loc
    )


def tensor_partition_reduce(op, data, *, mask=None, dtype=None, **kwargs) -> View:
    loc = user_location()
    return nl._reduce(nl._alu_code(op, loc), data, [0], dtype, mask, True, loc=loc, engine="gpsimd")


def tensor_copy(src, *, mask=None, dtype=None, engine=engine.unknown, **kwargs) -> View:
    loc = user_location()
    if isinstance(src, _dynamic_index.IndirectView):
        return _gather(src, dtype, mask, engine, loc)
    x = nl._on_chip(src, "tensor_copy", loc)
    out = nl._new_tile(x.shape, dtype or x.dtype, loc)
    nl._emit("copy", _engine(engine, "vector"), out, [x], mask=mask, loc=loc)
    return out


def _gather(src, dtype, mask, eng, loc) -> View:
    """tensor_copy of a tensor indirection: one gather instruction reading
    the data tile and, at run time, the offsets of the index tile."""
    if mask is not None:
        raise src.unsupported("a masked tensor_copy", loc)
    if _engine(eng, "vector") not in ("vector", "scalar", "gpsimd"):
        raise error("tensor indirection runs on the Vector, Scalar or GpSimd engine", "engine", loc)
    data = nl._flatten_free(src.data, loc)
    out = nl._new_tile(src.shape, dtype or src.dtype, loc)
    src.indices.verify(loc=loc)
    _tr.current().emit("gather", _engine(eng, "vector"), out, [data, src.indices], loc=loc)
    return out


def tensor_tensor_scan(
    data0,
    data1,
    initial,
    op0,
    op1,
    reverse0=False,
    reverse1=False,
    *,
    dtype=None,
    mask=None,
    **kwargs,
) -> View:
    loc = user_location()
    a = nl._flatten_free(nl._on_chip(data0, "tensor_tensor_scan", loc), loc)
    b = nl._flatten_free(nl._on_chip(data1, "tensor_tensor_scan", loc), loc)
    if a.shape != b.shape:
        raise error(
            f"tensor_tensor_scan: data0 {list(a.shape)} and data1 {list(b.shape)} differ in shape",
            "shape",
            loc,
        )
    # The initial value: a float constant, or a tile of one value per
    # partition (NKI's tensor_tensor_scan page allows both).
    if nl._is_scalar(initial):
        srcs, flags, imm = [a, b], 0, (float(initial),)
    elif isinstance(initial, View):
        init = nl._flatten_free(nl._on_chip(initial, "tensor_tensor_scan initial", loc), loc)
        if init.shape != (a.shape[0], 1):
            raise error(
                f"tensor_tensor_scan: initial {list(initial.shape)} must hold one value per "
                f"partition of the data ([{a.shape[0]}, 1]), or be a scalar",
                "shape",
                loc,
            )
        if mask is not None:
            raise error(
                "tensor_tensor_scan: a mask together with a tile initial is not supported yet",
                "operand",
                loc,
            )
        srcs, flags, imm = [a, b, init], _tr.FLAG_INITIAL_TILE, (0.0,)
    else:
        raise error(
            f"tensor_tensor_scan: initial must be a scalar or a [P, 1] tile, got "
            f"{type(initial).__name__}",
            "operand",
            loc,
        )
    out = nl._new_tile(a.shape, dtype or a.dtype, loc)
    nl._emit(
        "scan",
        "vector",
        out,
        srcs,
        mask=mask,
        loc=loc,
        alu0=nl._alu_code(op0, loc),
        alu1=nl._alu_code(op1, loc),
        flags=flags,
        imm=imm,
    )
    return out


def iota(expr, dtype, *, mask=None, **kwargs) -> View:
    """A tile holding the values of an index expression."""
    loc = user_location()
    if not isinstance(expr, Expr):
        raise error("iota takes an index expression (of nl.arange / nl.mgrid)", "operand", loc)
    shape = expr.shape if expr.ndim >= 2 else (expr.shape + (1,))
    e = expr.broadcast_to(shape) if expr.ndim >= 2 else Expr(shape, expr.base, expr.coef + (0,))
    out = nl._new_tile(shape, dtype, loc)
    nl._emit("iota", "gpsimd", out, [e], mask=mask, loc=loc)
    return out


def memset(shape, value, dtype, *, mask=None, engine=engine.unknown, **kwargs) -> View:
    loc = user_location()
    shape = tuple(int(s) for s in shape)
    out = nl._new_tile(shape, dtype, loc)
    nl._emit("memset", _engine(engine, "vector"), out, (), mask=mask, loc=loc, imm=(float(value),))
    return out


def affine_select(pred, on_true_tile, on_false_value, *, mask=None, dtype=None, **kwargs) -> View:
    """``pred ? on_true_tile : on_false_value`` where pred is an affine
    comparison of indices (a causal mask)."""
    loc = user_location()
    x = nl._on_chip(on_true_tile, "affine_select", loc)
    if not isinstance(pred, Pred):
        raise error("affine_select takes a comparison of index expressions as pred", "operand", loc)
    if len(pred.terms) == 1:
        expr, cmp = pred.terms[0], nl.ALU["greater_equal"]
    elif len(pred.terms) == 2 and pred.terms[0].coef == tuple(-c for c in pred.terms[1].coef):
        expr, cmp = pred.terms[0], nl.ALU["equal"]
    else:
        raise error(
            "affine_select takes one comparison (no &); use nl.where to combine", "operand", loc
        )
    try:
        expr = expr.broadcast_to(x.shape)
    except IndexError:
        raise error(
            f"the predicate's shape {list(expr.shape)} does not match the tile {list(x.shape)}",
            "shape",
            loc,
        ) from None
    out = nl._new_tile(x.shape, dtype or x.dtype, loc)
    nl._emit(
        "affine_select",
        "gpsimd",
        out,
        [x, None, expr],
        mask=mask,
        loc=loc,
        alu0=cmp,
        imm=(float(on_false_value),),
    )
    return out


def select(predicate, on_true, on_false, *, mask=None, dtype=None, **kwargs) -> View:
    return nl.where(predicate, on_true, on_false, dtype=dtype, mask=mask)


def bn_stats(data, *, mask=None, dtype=None, **kwargs) -> View:
    loc = user_location()
    x = nl._flatten_free(nl._on_chip(data, "bn_stats", loc), loc)
    box = _indexing.mask_box(mask, x.shape, loc)
    if box is None:
        raise error("the mask of bn_stats keeps no element", "mask", loc)
    x = x.sub(*box)
    if x.shape[1] > nl.tile_size.bn_stats_fmax:
        raise error(
            f"bn_stats takes at most {nl.tile_size.bn_stats_fmax} elements per "
            f"partition (nl.tile_size.bn_stats_fmax), got {x.shape[1]}",
            "bn-stats-limit",
            loc,
        )
    out = nl._new_tile((x.shape[0], 6), dtype or _dt.float32, loc)
    x.verify(loc=loc)
    current().emit("bn_stats", "vector", out, [x], loc=loc)
    return out


def bn_aggr(data, *, mask=None, dtype=None, **kwargs) -> View:
    loc = user_location()
    x = nl._flatten_free(nl._on_chip(data, "bn_aggr", loc), loc)
    if x.shape[1] % 6:
        raise error("bn_aggr takes the [P, 6k] output of bn_stats", "shape", loc)
    out = nl._new_tile((x.shape[0], 2), dtype or _dt.float32, loc)
    x.verify(loc=loc)
    current().emit("bn_aggr", "vector", out, [x], loc=loc)
    return out


def reciprocal(data, *, dtype=None, mask=None, engine=engine.unknown, **kwargs) -> View:
    return nl._unary(
        "reciprocal", data, dtype, mask, user_location(), engine=_engine(engine, "vector")
    )


# The search instructions (isa_search.py): max8, nc_find_index8 and
# nc_match_replace8 return new tiles here.
max8 = _isa_search.legacy_max8
nc_find_index8 = _isa_search.legacy_nc_find_index8
nc_match_replace8 = _isa_search.legacy_nc_match_replace8


# DMA ----------------------------------------------------------------------
def dma_copy(
    *args,
    dst=None,
    src=None,
    mask=None,
    dst_rmw_op=None,
    oob_mode=oob_mode.error,
    dge_mode=dge_mode.unknown,
    **kwargs,
) -> None:
    """Copies ``src`` to ``dst`` on a DMA queue (any of HBM/SBUF both ways).
    ``oob_mode=nisa.oob_mode.skip`` skips out-of-range elements;
    ``dst_rmw_op=np.add`` accumulates into ``dst``. The original positional
    form is ``dma_copy(src, dst)``."""
    if args:
        src, dst = (args + (None, None))[:2] if src is None and dst is None else (src, dst)
    _dma(dst, src, mask, dst_rmw_op, oob_mode, user_location())


def _broadcasts(shape: tuple, to: tuple) -> bool:
    try:
        return nl._tile_shape(shape, to) == tuple(to)
    except NKIError:
        return False


def _dma(dst, src, mask, dst_rmw_op, mode, loc) -> None:
    if not isinstance(dst, View) or not isinstance(src, View):
        raise error("dma_copy copies between kernel tensors and tiles", "operand", loc)
    if dst.size != src.size:
        raise error(
            f"dma_copy: source has {src.size} elements, destination {dst.size}", "shape", loc
        )
    if src.shape != dst.shape and src.dyn is not None and dst.dyn is None:
        # A row read at run time into a tile of another shape (cache[idx, :]
        # is [D], the tile [1, D]): the tile takes the row's shape — by unit
        # dims alone when that is the difference (a [P, h] slice of a 3-D tile
        # under a [P, 1, h] gather), which needs no contiguity.
        squeezed = _element_order.with_unit_dims(dst, src.shape)
        dst = dst.reshape(src.shape) if squeezed is None else squeezed
    elif src.shape != dst.shape and dst.dyn is not None and src.dyn is None:
        # The mirror: a tile into rows chosen at run time (a scatter,
        # vector_offset on the destination); the tile takes their shape.
        squeezed = _element_order.with_unit_dims(src, dst.shape)
        src = src.reshape(dst.shape) if squeezed is None else squeezed
    if src.shape != dst.shape:
        if _broadcasts(src.shape, dst.shape):
            src = nl._bcast(src, dst.shape)
        else:
            # A DMA moves elements in row-major order whatever the shapes.
            paired = _element_order.paired_views(src, dst)
            if paired is None:
                raise error(
                    f"dma_copy: cannot pair source {list(src.shape)} with destination "
                    f"{list(dst.shape)} element by element as one access each (their "
                    "dimensions do not nest)",
                    "shape",
                    loc,
                )
            src, dst = paired
    skip = int(mode) == int(oob_mode.skip)
    if dst_rmw_op is not None:
        nl._emit(
            "tensor_tensor",
            "dma",
            dst,
            [dst, src],
            mask=mask,
            loc=loc,
            alu0=nl._alu_code(dst_rmw_op, loc),
            oob_skip=skip,
        )
    else:
        nl._emit("copy", "dma", dst, [src], mask=mask, loc=loc, oob_skip=skip)


# NKI's DMA transposes, by the source's rank: the i-th axis of the result is
# axis axes[i] of the source.
_DMA_TRANSPOSE_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def _transposed_view(src: View, axes, loc) -> View:
    """``src`` with its axes permuted as ``nisa.dma_transpose`` does (no data
    moves: the DMA reads through it)."""
    src.static_only("nisa.dma_transpose", loc)
    default = _DMA_TRANSPOSE_AXES.get(src.ndim)
    if default is None:
        raise error(
            f"nisa.dma_transpose takes a 2-D, 3-D or 4-D source, got {src.ndim}-D "
            f"{list(src.shape)}",
            "shape",
            loc,
        )
    axes = default if axes is None else tuple(int(a) for a in axes)
    if axes != default:
        raise error(
            f"nisa.dma_transpose of a {src.ndim}-D source supports axes {default}, got {axes} "
            "(NKI supports (1, 0), (2, 1, 0) and (3, 1, 2, 0))",
            "operand",
            loc,
        )
    src.verify(loc=loc)
    return View(
        src.buf,
        src.offset,
        tuple(src.shape[a] for a in axes),
        tuple(src.strides[a] for a in axes),
    )


def dma_transpose(src, *, axes=None, mask=None, dtype=None, **kwargs) -> View:
    loc = user_location()
    t = _transposed_view(src, axes, loc)
    out = nl._new_tile(t.shape, dtype or src.dtype, loc)
    nl._emit("copy", "dma", out, [t], mask=mask, loc=loc)
    return out


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("annotations", "enum", "np")]
