"""``nki.isa`` (``nisa``): the NeuronCore instructions in the current NKI
form, destination first (``nisa.nc_matmul(dst, stationary, moving)``).

Each instruction is the original form (legacy_isa.py) writing into ``dst``:
the result is produced in place, one instruction, as the hardware does.
"""

from __future__ import annotations

from . import element_order
from . import isa_constants as constants  # noqa: F401 (nki.isa.constants)
from . import language as nl
from . import legacy_isa as _l
from .control_flow import (  # noqa: F401
    NkiScalar,
    VirtualRegister,
    register_alloc,
    register_load,
    register_move,
    register_store,
    scalar_alu,
    scalar_load,
    scalar_store,
)
from .dynamic_index import IndirectView
from .indexing import Expr
from .isa_constants import (  # noqa: F401
    dge_mode,
    dma_engine,
    engine,
    matmul_perf_mode,
    nc_version,
    oob_mode,
    reduce_cmd,
)
from .isa_partition_moves import local_gather, nc_stream_shuffle  # noqa: F401
from .isa_predicated import (  # noqa: F401
    range_select,
    select_reduce,
    tensor_copy_predicated,
    tensor_scalar_reduce,
)
from .isa_search import max8, nc_find_index8, nc_match_replace8, nonzero_with_count  # noqa: F401
from .legacy_isa import (  # noqa: F401
    NkiValidationError,
    get_nc_version,
    gpsimd_engine,
    scalar_engine,
    sync_engine,
    tensor_engine,
    unknown_engine,
    vector_engine,
)
from .logical_core import core_barrier, sendrecv  # noqa: F401
from .mx import nc_matmul_mx, quantize_mx  # noqa: F401
from .random_numbers import dropout  # noqa: F401
from .trace_state import PSUM, current, error, user_location
from .view import View


def _into(dst, value) -> None:
    if isinstance(dst, IndirectView):
        raise dst.unsupported("writing through (a scatter)")
    if not isinstance(dst, View):
        raise error(f"dst must be a tensor, got {type(dst).__name__}", "operand")
    if (
        isinstance(value, View)
        and value.shape != dst.shape
        and value.size == dst.size
        and not _l._broadcasts(value.shape, dst.shape)
    ):
        # A destination access pattern of another shape and the same size
        # (NKI-lib's [F, 1, 1, P] patterns): the result's elements go to it in
        # row-major order, as the engines write them.
        paired = element_order.paired_views(value, dst)
        if paired is not None:
            value, dst = paired
    nl._assign(dst, value)


def nc_matmul(
    dst,
    stationary,
    moving,
    is_stationary_onezero=False,
    is_moving_onezero=False,
    is_transpose=False,
    accumulate=None,
    tile_position=(),
    tile_size=(),
    perf_mode=None,
    name=None,
    **kwargs,
) -> None:
    """``dst = stationary.T @ moving`` in PSUM. ``accumulate=None``: the
    first matmul into a PSUM region writes it, later ones add to it."""
    loc = user_location()
    if is_transpose:
        return nc_transpose(dst, stationary)
    if perf_mode is not None and int(perf_mode) == int(matmul_perf_mode.double_row):
        return _double_row_matmul(dst, stationary, moving, accumulate, loc)
    r = nl._matmul(stationary, moving, loc)
    t = current()
    key = (dst.buf.index, dst.offset, dst.shape, dst.strides)
    if accumulate is None:
        accumulate = dst.buf.space == PSUM and key in t.matmul_written
    t.matmul_written.add(key)
    if accumulate:
        nl._accumulate(dst, r, "add")
    else:
        nl._assign(dst, r, loc)


def _double_row_matmul(dst, stationary, moving, accumulate, loc) -> None:
    """``perf_mode=double_row`` (FP8, NeuronCore-v3+): operands ``[K, 2, M]``
    and ``[K, 2, N]``, each partition holding two rows of the contraction;
    ``dst[M, N] = sum over k, r of stationary[k, r, m] * moving[k, r, n]``.
    Simulated as the two row-halves' matmuls accumulated into ``dst``. The
    hardware does both in the time of one; the cost model times two (a known
    over-estimate of this mode)."""
    for name, v in (("stationary", stationary), ("moving", moving)):
        if not isinstance(v, View) or v.ndim != 3 or v.shape[1] != 2:
            shape = list(v.shape) if isinstance(v, View) else type(v).__name__
            raise error(
                f"nc_matmul(perf_mode=double_row): {name} must be [K, 2, free], got {shape}",
                "matmul-shape",
                loc,
            )
        if v.dtype.name not in ("float8_e4m3", "float8_e4m3fn", "float8_e5m2"):
            raise error(
                f"nc_matmul(perf_mode=double_row) takes FP8 operands, {name} is {v.dtype.name}",
                "matmul-dtype",
                loc,
            )

    def row(v: View, r: int) -> View:
        v.verify(loc=loc)  # its pending bounds checks, before they lose an axis
        return View(
            v.buf,
            v.offset + r * v.strides[1],
            (v.shape[0], v.shape[2]),
            (v.strides[0], v.strides[2]),
        )

    nc_matmul(dst, row(stationary, 0), row(moving, 0), accumulate=accumulate)
    nc_matmul(dst, row(stationary, 1), row(moving, 1), accumulate=True)


def nc_transpose(dst, data, engine=engine.unknown, name=None, **kwargs) -> None:
    _into(dst, _l.nc_transpose(data, engine=engine, dtype=dst.dtype))


def tensor_tensor(dst, data1, data2, op, engine=engine.unknown, name=None, **kwargs) -> None:
    _into(dst, _l.tensor_tensor(data1, data2, op, dtype=dst.dtype, engine=engine))


def tensor_scalar(
    dst,
    data,
    op0,
    operand0,
    reverse0=False,
    op1=None,
    operand1=None,
    reverse1=False,
    engine=engine.unknown,
    name=None,
    **kwargs,
) -> None:
    _into(
        dst,
        _l.tensor_scalar(
            data, op0, operand0, reverse0, op1, operand1, reverse1, dtype=dst.dtype, engine=engine
        ),
    )


def scalar_tensor_tensor(
    dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, name=None, **kwargs
) -> None:
    _into(
        dst,
        _l.scalar_tensor_tensor(
            data=data,
            op0=op0,
            operand0=operand0,
            op1=op1,
            operand1=operand1,
            reverse0=reverse0,
            reverse1=reverse1,
            dtype=dst.dtype,
        ),
    )


def activation(
    dst,
    op,
    data,
    bias=None,
    scale=1.0,
    reduce_op=None,
    reduce_res=None,
    reduce_cmd=reduce_cmd.idle,
    name=None,
    **kwargs,
) -> None:
    """``dst = op(data * scale + bias)``; with ``reduce_res`` also the sum along
    the free dims into it. The reduction is emitted after the result is placed,
    so that the activation itself writes dst (no copy in between)."""
    loc = user_location()
    result = _l.activation(op, data, bias=bias, scale=scale, dtype=dst.dtype)
    _into(dst, result)  # when the activation now writes dst, result is a view of it
    if reduce_res is not None:
        _l._reduce_into(reduce_res, reduce_op or nl.add, result, None, loc)


def activation_reduce(
    dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None, **kwargs
) -> None:
    activation(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res)


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None, **kwargs) -> None:
    loc = user_location()
    r = nl._reduce(
        nl._alu_code(op, loc), data, axis, dst.dtype, None, keepdims, negate, loc, into=dst
    )
    if r is dst:  # reduced straight into dst
        return
    if r.shape != dst.shape and r.size == dst.size:
        r = r.reshape(dst.shape)
    _into(dst, r)


def tensor_partition_reduce(dst, op, data, name=None, **kwargs) -> None:
    _into(dst, _l.tensor_partition_reduce(op, data, dtype=dst.dtype))


def tensor_copy(dst, src, engine=engine.unknown, name=None, **kwargs) -> None:
    _into(dst, _l.tensor_copy(src, dtype=dst.dtype, engine=engine))


def tensor_tensor_scan(
    dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None, **kwargs
) -> None:
    _into(dst, _l.tensor_tensor_scan(data0, data1, initial, op0, op1, dtype=dst.dtype))


def reciprocal(dst, data, name=None, **kwargs) -> None:
    _into(dst, _l.reciprocal(data, dtype=dst.dtype))


def memset(dst, value, engine=engine.unknown, name=None, **kwargs) -> None:
    loc = user_location()
    if not isinstance(dst, View):
        raise error("memset writes a tensor (dst)", "operand", loc)
    nl._memset(dst, value, loc)


def _pattern_expr(dst: View, pattern, offset, channel_multiplier, loc) -> Expr:
    """``offset + p * channel_multiplier + sum(i_k * step_k)`` over dst's
    positions; pattern is [[step, num], ...] for the free dims."""
    steps = [int(s) for s, _ in pattern]
    nums = [int(n) for _, n in pattern]
    free = 1
    for n in dst.shape[1:]:
        free *= n
    import math

    if math.prod(nums) != free:
        raise error(
            f"pattern {pattern} covers {math.prod(nums)} elements per partition, dst has {free}",
            "shape",
            loc,
        )
    shape = (dst.shape[0], *nums)
    return Expr(shape, int(offset), (int(channel_multiplier), *steps))


def iota(dst, pattern=None, offset=0, channel_multiplier=0, name=None, expr=None, **kwargs):
    loc = user_location()
    if isinstance(pattern, Expr) or expr is not None:
        e = pattern if isinstance(pattern, Expr) else expr
        _into(dst, _l.iota(e, dst.dtype))
        return
    e = _pattern_expr(dst, pattern, offset, channel_multiplier, loc)
    flat = View(dst.buf, dst.offset, e.shape, _split_strides(dst, e.shape, loc))
    nl._emit("iota", "gpsimd", flat, [e], loc=loc)


def _split_strides(dst: View, shape, loc):
    """Strides of dst seen with the free dims reshaped to shape[1:]."""
    flat = nl._flatten_free(dst, loc) if dst.ndim != 2 else dst
    inner = flat.strides[1]
    strides = []
    acc = inner
    for n in reversed(shape[1:]):
        strides.append(acc)
        acc *= n
    return (flat.strides[0], *reversed(strides))


def affine_select(
    dst,
    pattern,
    channel_multiplier,
    on_true_tile,
    on_false_value,
    cmp_op=None,
    offset=0,
    name=None,
    **kwargs,
) -> None:
    loc = user_location()
    from .indexing import Pred

    if isinstance(pattern, Pred):  # the legacy argument order with a dst
        _into(dst, _l.affine_select(pattern, channel_multiplier, on_true_tile, dtype=dst.dtype))
        return
    e = _pattern_expr(dst, pattern, offset, channel_multiplier, loc)
    x = nl._on_chip(on_true_tile, "affine_select", loc)
    flat_dst = View(dst.buf, dst.offset, e.shape, _split_strides(dst, e.shape, loc))
    flat_x = View(x.buf, x.offset, e.shape, _split_strides(x, e.shape, loc))
    cmp = nl._alu_code(cmp_op or nl.equal, loc)
    nl._emit(
        "affine_select",
        "gpsimd",
        flat_dst,
        [flat_x, None, e],
        loc=loc,
        alu0=cmp,
        imm=(float(on_false_value),),
    )


def select(dst, predicate, on_true, on_false, name=None, **kwargs) -> None:
    _into(dst, nl.where(predicate, on_true, on_false, dtype=dst.dtype))


def bn_stats(dst, data, name=None, **kwargs) -> None:
    _into(dst, _l.bn_stats(data, dtype=dst.dtype))


def bn_aggr(dst, data, name=None, **kwargs) -> None:
    _into(dst, _l.bn_aggr(data, dtype=dst.dtype))


def dma_copy(
    dst=None,
    src=None,
    mask=None,
    dst_rmw_op=None,
    oob_mode=oob_mode.error,
    dge_mode=dge_mode.unknown,
    priority=None,
    engine=None,
    name=None,
    **kwargs,
) -> None:
    """Copies ``src`` to ``dst`` on a DMA queue."""
    _l._dma(dst, src, mask, dst_rmw_op, oob_mode, user_location())


def dma_compute(
    dst,
    srcs,
    reduce_op,
    scales=None,
    unique_indices=True,
    oob_mode=oob_mode.error,
    name=None,
    **kwargs,
) -> None:
    loc = user_location()
    srcs = list(srcs)
    if not srcs:
        raise error("dma_compute needs at least one source", "operand", loc)
    _l._dma(dst, srcs[0], None, None, oob_mode, loc)
    for s in srcs[1:]:
        _l._dma(dst, s, None, reduce_op, oob_mode, loc)


def dma_transpose(dst, src, axes=None, name=None, **kwargs) -> None:
    """One DMA from ``src`` read with its axes permuted (2-D (1, 0), 3-D
    (2, 1, 0), 4-D (3, 1, 2, 0)) into ``dst``, of that shape and dtype."""
    loc = user_location()
    if not isinstance(dst, View):
        raise error(f"dst must be a tensor, got {type(dst).__name__}", "operand", loc)
    t = _l._transposed_view(src, axes, loc)
    if tuple(dst.shape) != tuple(t.shape):
        raise error(
            f"nisa.dma_transpose: dst is {list(dst.shape)}, the transposed source is "
            f"{list(t.shape)}",
            "shape",
            loc,
        )
    if dst.dtype != src.dtype:
        raise error(
            f"nisa.dma_transpose keeps the element type: src is {src.dtype}, dst {dst.dtype}",
            "dtype",
            loc,
        )
    nl._emit("copy", "dma", dst, [t], loc=loc)


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("annotations",)]
