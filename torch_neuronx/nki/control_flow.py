"""Run-time control flow: the engine sequencers' scalar registers and the
loops and branches they steer.

NKI's names: ``nisa.register_alloc / register_move / register_load /
register_store`` (``nisa.VirtualRegister``), ``nisa.scalar_load /
scalar_store`` (``nisa.NkiScalar``, NKI 0.7's replacement, with traced
arithmetic), ``nl.dynamic_range``, ``nl.fori_loop``, ``nl.while_loop`` and
``nl.if_else``.

A register's value exists only when the kernel runs, so a loop bounded by
one is not unrolled: its body is traced once and recorded between the
simulator's control-flow records (runtime ``control_flow.h``): ``scalar``
(a register operation, a load from or a store to a one-element tile) and
``branch`` (to an instruction when a register is zero / nonzero, or always).
The interpreter repeats the body as many times as the registers say on
each run, so one trace serves every trip count (the trace cache and
``torch.compile`` see one program), and the cost model times the
iterations a run takes.
"""

from __future__ import annotations

import numbers

from . import dtypes as dt
from . import layout
from . import trace_state as _trace_state
from .trace_state import (
    FLAG_OPERAND0_IMM,
    FLAG_OPERAND1_IMM,
    HBM,
    PSUM,
    SBUF,
    SPACE_NAMES,
    current,
    error,
    user_location,
)
from .view import View

ALU_CODES = layout.ALU
_WIDTH = {"int32": 0, "uint32": 1}  # control_flow.h kScalarInt32 / kScalarUint32
# Sequencer instructions are recorded on one engine (the cost model charges
# every compute engine's sequencer for them).
_ENGINE = "gpsimd"


class _ControlFlow:
    """The control-flow state of one trace: registers allocated, which are
    written, and the loops open."""

    def __init__(self):
        self.registers = 0
        self.written: set[int] = set()
        self.open_loops = 0
        self.broken = None  # where a dynamic loop's body was left by `break`
        # The loop or if_else being traced at the top level: its first
        # instruction and the epoch (LNC=2) it started in.
        self.depth = 0
        self.region_start = 0
        self.region_epoch = 0

    def new_register(self) -> int:
        r = self.registers
        self.registers += 1
        return r


def _state(t=None) -> _ControlFlow:
    t = t or current()
    s = getattr(t, "control_flow", None)
    if s is None:
        s = _ControlFlow()
        t.control_flow = s
    return s


# Scalars -----------------------------------------------------------------
class NkiScalar:
    """One integer computed on the device (``nisa.NkiScalar``): loaded with
    ``nisa.scalar_load``, combined with Python ints and other scalars of its
    dtype by traced arithmetic (``i * 4 + 1`` records the operations), and
    used as a loop bound, a loop condition, an ``if_else`` condition or an
    access pattern's ``scalar_offset``. Its value is not known while the
    kernel is traced: ``bool()``, ``int()`` and Python ``if``/``while`` on
    it are a TypeError."""

    __slots__ = ("reg", "dtype")

    def __init__(self, reg: int, dtype=None):
        self.reg = reg
        self.dtype = dt.as_dtype(dtype or "int32")

    def __repr__(self) -> str:
        return f"<nki scalar {self.dtype.name} (register {self.reg})>"

    # Values known only at run time.
    def __bool__(self):
        raise _no_value(self, "has no truth value while the kernel is traced")

    def __int__(self):
        raise _no_value(self, "cannot be converted with int() while the kernel is traced")

    __index__ = __int__

    def __float__(self):
        raise _no_value(self, "cannot be converted with float() while the kernel is traced")

    def __iter__(self):
        raise _no_value(self, "is not iterable")

    # Traced arithmetic (nisa.scalar_alu).
    def _op(self, alu, other, reverse=False):
        a, b = (other, self) if reverse else (self, other)
        return _alu(alu, a, b, user_location())

    def __add__(self, o):
        return self._op("add", o)

    def __radd__(self, o):
        return self._op("add", o, True)

    def __sub__(self, o):
        return self._op("subtract", o)

    def __rsub__(self, o):
        return self._op("subtract", o, True)

    def __mul__(self, o):
        return self._op("multiply", o)

    def __rmul__(self, o):
        return self._op("multiply", o, True)

    def __floordiv__(self, o):
        return self._op("divide", o)

    def __mod__(self, o):
        return self._op("fmod", o)

    def __neg__(self):
        return _alu("subtract", 0, self, user_location())

    def __lt__(self, o):
        return self._op("less", o)

    def __le__(self, o):
        return self._op("less_equal", o)

    def __gt__(self, o):
        return self._op("greater", o)

    def __ge__(self, o):
        return self._op("greater_equal", o)

    def __eq__(self, o):
        return self._op("equal", o)

    def __ne__(self, o):
        return self._op("not_equal", o)

    __hash__ = object.__hash__


class VirtualRegister(NkiScalar):
    """``nisa.register_alloc()``: a register a kernel writes with
    ``register_move`` / ``register_load`` and reads with ``register_store``
    or as a loop bound (NKI's VirtualRegister, deprecated for NkiScalar in
    NKI 0.7; a register here also takes part in a scalar's arithmetic)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<nki register {self.reg}>"


def _no_value(s, what) -> TypeError:
    loc = user_location()
    return TypeError(
        f"{loc[0]}:{loc[1]}: {s!r} {what}: its value exists only when the kernel runs "
        "(use nl.fori_loop / nl.while_loop / nl.if_else for run-time control flow)"
    )


def is_scalar(x) -> bool:
    return isinstance(x, NkiScalar)


def _check_readable(s: NkiScalar, loc) -> int:
    if s.reg not in _state().written:
        raise error(
            f"{s!r} is read before anything was written to it (register_alloc() without "
            "an initial value, and no register_load / register_move before this read)",
            "register",
            loc,
        )
    return s.reg


def _operand(x, loc, what):
    """(is_immediate, value or register) of a scalar operand."""
    if isinstance(x, NkiScalar):
        return False, _check_readable(x, loc)
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise error(
            f"{what} must be an integer or an NkiScalar, got {type(x).__name__}",
            "register",
            loc,
        )
    x = int(x)
    if not -(2**31) <= x < 2**32:
        raise error(f"{what} {x} does not fit in 32 bits", "register", loc)
    return True, x


def _core(t) -> int:
    """The physical core being traced (LNC=2, several ranks)."""
    return getattr(t, "physical_core", t.core)


def _emit_scalar(dst_reg, alu, a, b=None, *, width=0, src=None, dst=None, loc=None) -> int:
    """One control_flow.h kScalar record: reg[dst_reg] = alu(a, b) (a from
    ``src``, a one-element tile, when given), also stored into ``dst``."""
    t = current()
    flags = 0
    # imm[3]: the core whose sequencers run it (the cost model's, LNC=2).
    imm = [0.0, 0.0, float(width), float(_core(t))]
    if src is None:
        a_imm, a_val = a
        if a_imm:
            flags |= FLAG_OPERAND0_IMM
        imm[0] = float(a_val)
    if alu != "bypass":
        b_imm, b_val = b
        if b_imm:
            flags |= FLAG_OPERAND1_IMM
        imm[1] = float(b_val)
    idx = t.emit(
        "scalar",
        _ENGINE,
        dst,
        (src,) if src is not None else (),
        alu0=ALU_CODES[alu],
        flags=flags,
        keep=-1 if dst_reg is None else dst_reg,
        imm=imm,
        loc=loc,
    )
    if dst_reg is not None:
        _state(t).written.add(dst_reg)
    return idx


def _width_of(*xs) -> tuple:
    dtypes = {x.dtype for x in xs if isinstance(x, NkiScalar)}
    if len(dtypes) > 1:
        names = sorted(d.name for d in dtypes)
        raise error(
            f"scalar operands of different dtypes ({', '.join(names)}): NKI's scalar "
            "arithmetic needs one dtype",
            "register",
        )
    d = dtypes.pop() if dtypes else dt.as_dtype("int32")
    return d, _WIDTH[d.name]


_COMPARISONS = {"less", "less_equal", "greater", "greater_equal", "equal", "not_equal"}


def _alu(alu, a, b, loc) -> NkiScalar:
    d, width = _width_of(a, b)
    s = _state()
    r = s.new_register()
    _emit_scalar(
        r,
        alu,
        _operand(a, loc, "a scalar operand"),
        _operand(b, loc, "a scalar operand"),
        width=width,
        loc=loc,
    )
    # A comparison is an int32 0 or 1 (NKI: comparisons return nl.int32).
    return NkiScalar(r, "int32" if alu in _COMPARISONS else d)


def _one_element(src, loc, what, *, store=False) -> View:
    if not isinstance(src, View):
        raise error(
            f"{what} must be a tensor with exactly one element, got {type(src).__name__}",
            "register",
            loc,
        )
    if src.size != 1:
        raise error(
            f"{what} must be a tensor with exactly one element (shape [1] or [1, 1]), got "
            f"shape {list(src.shape)}: a register holds one scalar",
            "register",
            loc,
        )
    if src.buf.space == PSUM:
        raise error(
            f"{what} must be in SBUF or HBM, not PSUM (copy it to SBUF with "
            "nisa.tensor_copy first)",
            "register",
            loc,
        )
    if src.buf.space not in (SBUF, HBM):
        raise error(f"{what} in {SPACE_NAMES[src.buf.space]}", "register", loc)
    if getattr(src, "dyn", None) is not None:
        raise error(f"{what} at a run-time index is not supported yet", "register", loc)
    if src.dtype.itemsize > 4 or not src.dtype.is_simulated:
        raise error(f"{what} of dtype {src.dtype.name}: registers hold 32 bits", "dtype", loc)
    src.verify(loc=loc)
    return src


# nki.isa: registers ---------------------------------------------------------
def register_alloc(x=None) -> VirtualRegister:
    """``nisa.register_alloc(x=None)``: a new register, set to the integer
    ``x`` when given (else unwritten until a register_load / register_move)."""
    r = VirtualRegister(_state().new_register())
    if x is not None:
        register_move(r, x)
    return r


def _check_register(dst, loc, name) -> None:
    if not isinstance(dst, NkiScalar):
        raise error(
            f"{name}: the destination must be a register (nisa.register_alloc()), got "
            f"{type(dst).__name__}",
            "register",
            loc,
        )


def register_move(dst, src, **kwargs) -> None:
    """``nisa.register_move(dst, src)``: dst = an integer or another
    register's value."""
    loc = user_location()
    _check_register(dst, loc, "register_move")
    _emit_scalar(dst.reg, "bypass", _operand(src, loc, "register_move's source"), loc=loc)


def register_load(dst, src, **kwargs) -> None:
    """``nisa.register_load(dst, src)``: dst = the one element of ``src``
    (SBUF or HBM, any type of up to 32 bits; a float's value truncated),
    read when the kernel runs."""
    loc = user_location()
    _check_register(dst, loc, "register_load")
    src = _one_element(src, loc, "register_load's source")
    _emit_scalar(dst.reg, "bypass", None, src=src, width=_WIDTH.get(dst.dtype.name, 0), loc=loc)


def register_store(dst, src, **kwargs) -> None:
    """``nisa.register_store(dst, src)``: writes the register ``src`` into
    the one-element tensor ``dst`` (converted to its type)."""
    loc = user_location()
    _check_register(src, loc, "register_store")
    dst = _one_element(dst, loc, "register_store's destination", store=True)
    _emit_scalar(None, "bypass", _operand(src, loc, "register_store's source"), dst=dst, loc=loc)


# nki.isa: scalars ------------------------------------------------------------
def scalar_load(src, engine=None, **kwargs) -> NkiScalar:
    """``nisa.scalar_load(src)``: an NkiScalar of the one element of an
    int32 / uint32 tile."""
    loc = user_location()
    src = _one_element(src, loc, "scalar_load's source")
    if src.dtype.name not in _WIDTH:
        raise error(
            f"scalar_load's source must be nl.int32 or nl.uint32, got {src.dtype.name}",
            "dtype",
            loc,
        )
    r = _state().new_register()
    _emit_scalar(r, "bypass", None, src=src, width=_WIDTH[src.dtype.name], loc=loc)
    return NkiScalar(r, src.dtype)


def scalar_store(dst, value, engine=None, **kwargs) -> None:
    """``nisa.scalar_store(dst, value)``: writes an NkiScalar into a
    one-element tile of its dtype."""
    loc = user_location()
    if not isinstance(value, NkiScalar):
        raise error(
            f"scalar_store's value must be an NkiScalar, got {type(value).__name__}",
            "register",
            loc,
        )
    dst = _one_element(dst, loc, "scalar_store's destination", store=True)
    if dst.dtype != value.dtype:
        raise error(
            f"scalar_store: a {value.dtype.name} scalar into a {dst.dtype.name} tile "
            "(store at the scalar's own dtype)",
            "dtype",
            loc,
        )
    _emit_scalar(
        None,
        "bypass",
        _operand(value, loc, "scalar_store's value"),
        dst=dst,
        width=_WIDTH[value.dtype.name],
        loc=loc,
    )


def scalar_alu(x, y, op, **kwargs) -> NkiScalar:
    """``nisa.scalar_alu``: op(x, y) of two scalars (or a scalar and an int):
    add, subtract, multiply, divide, fmod, maximum, minimum, comparisons."""
    loc = user_location()
    name = getattr(op, "__name__", str(op))
    alu = {"mod": "fmod", "max": "maximum", "min": "minimum"}.get(name, name)
    if alu not in ALU_CODES or alu == "bypass":
        raise error(f"scalar_alu: {name} is not an operation on scalars", "register", loc)
    return _alu(alu, x, y, loc)


def as_index_tile(s: NkiScalar, loc) -> View:
    """A register used where the simulator reads an index from a tile (an
    access pattern's scalar_offset): its value stored into a one-element
    int32 SBUF tile first."""
    t = current()
    tile = View.contiguous(t.new_buffer(SBUF, "int32", (1, 1), "scalar offset", loc))
    _emit_scalar(None, "bypass", _operand(s, loc, "the offset"), dst=tile, loc=loc)
    return tile


# Branches --------------------------------------------------------------------
def _branch(cond_reg, when, loc) -> int:
    """A kBranch record whose target is patched later: its index."""
    t = current()
    alu = "bypass" if cond_reg is None else ("equal" if when == "zero" else "not_equal")
    return t.emit(
        "branch",
        _ENGINE,
        None,
        (),
        alu0=ALU_CODES[alu],
        keep=-1 if cond_reg is None else cond_reg,
        imm=(-1.0, float(_core(t))),
        loc=loc,
    )


def _patch(idx: int, target: int) -> None:
    current().imms[idx * layout.IMMEDIATES] = float(target)


def _label() -> int:
    return current().ninstr


def _enter_region(loc) -> None:
    """Before a loop body or branch: deferred PSUM zeroing is emitted now,
    else a body would zero the tile in every iteration (or one branch
    only)."""
    t = current()
    _state(t)
    for b in t.buffers:
        if b.pending_zero is not None:
            t.flush_zero(b)


def _open_region() -> None:
    t = current()
    s = _state(t)
    if s.depth == 0:
        s.region_start = t.ninstr
        s.region_epoch = t.epoch
    s.depth += 1


def _close_region(loc) -> None:
    """Ends a loop or if_else; a top-level one becomes a block the LNC=2
    interleaving keeps whole (trace.interleave_cores)."""
    t = current()
    s = _state(t)
    s.depth -= 1
    if s.depth:
        return
    if t.epoch != s.region_epoch:
        raise error(
            "a core_barrier / sendrecv inside a dynamic loop or if_else is not supported yet",
            "control-flow",
            loc,
        )
    blocks = getattr(t, "control_flow_blocks", None)
    if blocks is None:
        blocks = t.control_flow_blocks = []
    blocks.append((s.region_start, t.ninstr - 1))


def control_flow_block_of(t) -> dict:
    """{instruction: block} of the instructions in top-level loops and
    if_elses."""
    out = {}
    for k, (a, b) in enumerate(getattr(t, "control_flow_blocks", None) or ()):
        for i in range(a, b + 1):
            out[i] = k
    return out


def remap_branches(t, order) -> None:
    """The branch targets after the LNC=2 interleaving puts instruction
    ``order[k]`` at position k (called before the records move): a target
    in its block moves with it, the end of the block stays right after it."""
    blocks = getattr(t, "control_flow_blocks", None)
    if not blocks:
        return
    new_pos = {old: new for new, old in enumerate(order)}
    n, m = layout.INSTRUCTION_WORDS, layout.IMMEDIATES
    op_word = layout.INSTRUCTION_FIELDS.index("op")
    branch = layout.OPS["branch"]
    for a, b in blocks:
        for i in range(a, b + 1):
            if t.words[i * n + op_word] != branch:
                continue
            target = int(t.imms[i * m])
            if a <= target <= b:
                t.imms[i * m] = float(new_pos[target])
            elif target == b + 1:
                t.imms[i * m] = float(new_pos[b] + 1)
            else:
                raise AssertionError("a branch leaves its block")


class _Loop:
    def __init__(self, start, stop, step, loc):
        if isinstance(step, NkiScalar) or not isinstance(step, numbers.Integral) or step <= 0:
            raise error(
                f"a dynamic loop's step must be a positive compile-time integer, got {step!r}",
                "control-flow",
                loc,
            )
        for v in (start, stop):
            if isinstance(v, NkiScalar) and v.dtype.name != "int32":
                raise error(
                    f"a dynamic loop's bound must be an nl.int32 scalar, got {v.dtype.name}",
                    "dtype",
                    loc,
                )
        self.loc = loc
        self.step = int(step)
        _enter_region(loc)
        _open_region()
        s = _state()
        self.counter = s.new_register()
        self.cond = s.new_register()
        _emit_scalar(self.counter, "bypass", _operand(start, loc, "the loop's start"), loc=loc)
        self.stop = _operand(stop, loc, "the loop's stop")
        self.top = _label()
        _emit_scalar(self.cond, "less", (False, self.counter), self.stop, loc=loc)
        self.exit = _branch(self.cond, "zero", loc)
        s.open_loops += 1

    def value(self) -> NkiScalar:
        # The body reads the iteration value by value: a copy of the counter,
        # so that writing it (register_move) does not steer the loop.
        r = _state().new_register()
        _emit_scalar(r, "bypass", (False, self.counter), loc=self.loc)
        return NkiScalar(r, "int32")

    def close(self) -> None:
        _emit_scalar(self.counter, "add", (False, self.counter), (True, self.step), loc=self.loc)
        back = _branch(None, "always", self.loc)
        _patch(back, self.top)
        _patch(self.exit, _label())
        _state().open_loops -= 1
        _close_region(self.loc)


class dynamic_range:
    """``nl.dynamic_range(start, stop=None, step=1)``: a loop run on the
    device, bounds ints or int32 registers / scalars. The body is traced
    once; the loop variable is an NkiScalar of the iteration value."""

    def __init__(self, start, stop=None, step=1):
        if stop is None:
            start, stop = 0, start
        self.start, self.stop, self.step = start, stop, step

    def __iter__(self):
        loc = user_location()
        loop = _Loop(self.start, self.stop, self.step, loc)
        try:
            yield loop.value()
        except GeneratorExit:
            # `break` (or an exception) left the body: the loop would run
            # only the part traced so far. Reported when the trace ends
            # (finish_trace), since a generator being closed cannot raise.
            t = getattr(_trace_state.state, "trace", None)
            if t is not None and getattr(t, "control_flow", None) is not None:
                t.control_flow.broken = loc
            raise
        loop.close()

    def __repr__(self) -> str:
        return f"dynamic_range({self.start!r}, {self.stop!r}, {self.step!r})"


def fori_loop(lower, upper, body_fun, step=1, unroll=None):
    """``nl.fori_loop(lower, upper, body_fun, step=1, unroll=None)``:
    ``body_fun(i)`` for i in range(lower, upper, step) on the device (the
    body traced once; ``i`` an NkiScalar). ``unroll=True`` with integer
    bounds calls the body for each value at trace time instead."""
    loc = user_location()
    if unroll:
        if any(isinstance(v, NkiScalar) for v in (lower, upper)):
            raise error(
                "fori_loop(unroll=True) needs bounds known when the kernel is traced, "
                "not registers",
                "control-flow",
                loc,
            )
        for i in range(int(lower), int(upper), int(step)):
            body_fun(i)
        return None
    loop = _Loop(lower, upper, step, loc)
    body_fun(loop.value())
    loop.close()
    return None


def _condition(x, loc, what) -> tuple:
    if isinstance(x, NkiScalar):
        if x.dtype.name != "int32":
            raise error(
                f"{what} must be a signed 32-bit value (nl.int32), got {x.dtype.name}: compare "
                "it with zero first (value != 0)",
                "dtype",
                loc,
            )
        return False, _check_readable(x, loc)
    if isinstance(x, bool):
        raise error(f"{what} must be an int or an NkiScalar, not a Python bool", "register", loc)
    return _operand(x, loc, what)


def while_loop(init, body_fun):
    """``nl.while_loop(init, body_fun)``: ``r = init; while r != 0: r =
    body_fun(r)``, run on the device (the condition checked before each
    iteration; the body traced once, receiving and returning an int32
    NkiScalar or an int)."""
    loc = user_location()
    first = _condition(init, loc, "while_loop's initial condition")
    _enter_region(loc)
    _open_region()
    s = _state()
    cond = s.new_register()
    _emit_scalar(cond, "bypass", first, loc=loc)
    top = _label()
    exit_ = _branch(cond, "zero", loc)
    s.open_loops += 1
    current_value = s.new_register()
    _emit_scalar(current_value, "bypass", (False, cond), loc=loc)
    nxt = body_fun(NkiScalar(current_value, "int32"))
    if nxt is None:
        raise error(
            "while_loop's body must return the next condition (an int32 NkiScalar or an int)",
            "control-flow",
            loc,
        )
    _emit_scalar(cond, "bypass", _condition(nxt, loc, "while_loop's next condition"), loc=loc)
    back = _branch(None, "always", loc)
    _patch(back, top)
    _patch(exit_, _label())
    s.open_loops -= 1
    _close_region(loc)
    return None


def if_else(cond, then_fn, else_fn=None):
    """``nl.if_else(cond, then_fn, else_fn=None)``: ``then_fn()`` when
    ``cond`` is nonzero, else ``else_fn()``. A Python bool or int is decided
    when the kernel is traced; an NkiScalar when it runs (a branch)."""
    loc = user_location()
    if not isinstance(cond, NkiScalar):
        if not isinstance(cond, numbers.Integral):
            raise error(
                f"if_else's condition must be a bool, an int or an NkiScalar, got "
                f"{type(cond).__name__}",
                "control-flow",
                loc,
            )
        if cond:
            then_fn()
        elif else_fn is not None:
            else_fn()
        return None
    _, reg = _condition(cond, loc, "if_else's condition")
    _enter_region(loc)
    _open_region()
    to_else = _branch(reg, "zero", loc)
    then_fn()
    if else_fn is None:
        _patch(to_else, _label())
    else:
        to_end = _branch(None, "always", loc)
        _patch(to_else, _label())
        else_fn()
        _patch(to_end, _label())
    _close_region(loc)
    return None


def finish_trace(t) -> None:
    """At the end of a trace: a dynamic loop left with ``break`` is an error
    (its body would be the part traced before the break)."""
    s = getattr(t, "control_flow", None)
    if s is None:
        return
    if s.broken is not None:
        raise error(
            "`break` out of an nl.dynamic_range loop: the loop runs on the device, its body "
            "traced once; end it through its bounds (or use nl.while_loop)",
            "control-flow",
            s.broken,
        )
