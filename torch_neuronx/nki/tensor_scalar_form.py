"""``tensor_scalar`` in the original (tile-returning) form, and what it is
built from: the engine an instruction names and a scalar operand (an
immediate, or a ``[P, 1]`` tile broadcast along the free dims).

legacy_isa.py exposes ``tensor_scalar`` (``neuronxcc.nki.isa``); the composite
instructions (isa_predicated.py) build on it too, so it lives here, below
both (legacy_isa imports those composites: one module for both would be an
import cycle).
"""

from __future__ import annotations

from . import language as nl
from . import trace_state as _tr
from .isa_constants import engine
from .trace_state import error, user_location
from .view import View

_ENGINE_NAMES = {
    engine.tensor: "tensor",
    engine.scalar: "scalar",
    engine.gpsimd: "gpsimd",
    engine.vector: "vector",
    engine.dma: "dma",
}


def engine_name(e, default: str) -> str:
    if e is None or e == engine.unknown:
        return default
    return _ENGINE_NAMES.get(engine(int(e)), default)


def imm_or_tile(x, shape, loc):
    """A scalar operand: an immediate, or a (P, 1) tile broadcast along the
    free dims. Returns (is_immediate, value_or_view)."""
    if nl._is_scalar(x):
        return True, float(x)
    if isinstance(x, View):
        x = nl._on_chip(x, "scalar operand", loc)
        return False, nl._bcast(x, shape)
    raise error(f"expected a scalar or a (P, 1) tile, got {type(x).__name__}", "operand", loc)


def tensor_scalar(
    data,
    op0,
    operand0,
    reverse0=False,
    op1=None,
    operand1=None,
    reverse1=False,
    *,
    dtype=None,
    mask=None,
    engine=engine.unknown,
    **kwargs,
) -> View:
    loc = user_location()
    x = nl._on_chip(data, "tensor_scalar", loc)
    out = nl._new_tile(x.shape, dtype or x.dtype, loc)
    flags = 0
    srcs = [x, None, None]
    imm = [0.0, 0.0]
    if operand0 is None:
        operand0 = 0.0
    is_imm, v = imm_or_tile(operand0, x.shape, loc)
    if is_imm:
        flags |= _tr.FLAG_OPERAND0_IMM
        imm[0] = v
    else:
        srcs[1] = v
    alu1 = 0
    if op1 is not None:
        alu1 = nl._alu_code(op1, loc)
        is_imm, v = imm_or_tile(0.0 if operand1 is None else operand1, x.shape, loc)
        if is_imm:
            flags |= _tr.FLAG_OPERAND1_IMM
            imm[1] = v
        else:
            srcs[2] = v
    else:
        flags |= _tr.FLAG_OPERAND1_IMM
    if reverse0:
        flags |= _tr.FLAG_REVERSE0
    if reverse1:
        flags |= _tr.FLAG_REVERSE1
    name = nl._op_name(op0)
    if name in nl.ACT and name not in nl.ALU:  # a unary op0 (nl.abs, nl.rsqrt)
        tmp = nl._unary(name, x, None, mask, loc, engine=engine_name(engine, "vector"))
        if op1 is None:
            return tmp
        return tensor_scalar(tmp, op1, operand1, reverse1, dtype=dtype, mask=mask)
    nl._emit(
        "tensor_scalar",
        engine_name(engine, "vector"),
        out,
        srcs,
        mask=mask,
        loc=loc,
        alu0=nl._alu_code(op0, loc),
        alu1=alu1,
        flags=flags,
        imm=tuple(imm),
    )
    return out
