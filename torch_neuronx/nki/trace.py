"""Tracing an NKI kernel into a tile program: ``Trace``, the program being
recorded, and the words of its instruction records.

The kernel runs once per (argument shapes, dtypes, grid, constants) with every
loop unrolled: each ``nl``/``nisa`` call appends instructions over affine
access patterns of buffers (kernel arguments and results in HBM, tiles in
SBUF and PSUM). The records go to the C++ simulator (``runtime/nki``) as flat
integer arrays; it checks the whole program, plans its memory, estimates its
cost and runs it.

Everything a single call can check (shapes, partition and matmul limits,
dtype rules, bounds, writes to immutable inputs) is checked in the front end,
at the call, so that the error names the kernel line that made it.

The rest of the front end's tracing: trace_state.py (the trace being
recorded, errors at the kernel's line, buffers, the NeuronCore's constants),
view.py (the tensors a kernel handles), view_indexing.py and dynamic_index.py
(indexing them), indexing.py (index expressions and masks).
"""

from __future__ import annotations

import math
import threading

# bitcast and view_indexing hand themselves to View when they load (see
# view.py), before any view of a trace is indexed or given another dtype.
from . import bitcast as _bitcast
from . import dtypes as dt
from . import layout
from . import view_indexing as _view_indexing  # noqa: F401
from .control_flow import control_flow_block_of, remap_branches
from .dynamic_index import dynamic_dma
from .indexing import Expr
from .trace_state import (
    ENGINE,
    FLAG_ACCUMULATE,
    HBM,
    MAX_DIMS,
    OP,
    PMAX,
    PSUM,
    PSUM_BYTES_PER_PARTITION,
    SBUF,
    SBUF_BYTES_PER_PARTITION,
    SPACE_NAMES,
    Buf,
    error,
    user_location,
)
from .view import View


class Trace:
    """The tile program being recorded."""

    def __init__(self, grid: tuple, lnc: int = 1):
        # program_id and shared_counter belong to the program being traced:
        # an LNC=2 launch traces its two cores on two threads
        # (logical_core.py), so they are per thread.
        self._per_thread = threading.local()
        self._program_id: tuple = (0,) * len(grid)
        self._shared_counter = 0
        self.buffers: list[Buf] = []
        self.words: list[int] = []
        self.imms: list[float] = []
        self.instr_locs: list[int] = []
        self.locs: list[tuple] = []
        self._loc_ids: dict = {}
        self.externals = 0
        self.grid = grid
        # The physical cores traced together (2: an LNC=2 launch, one
        # program per core, interleaved at barriers; logical_core.py).
        self.lnc = lnc
        self.cores = None  # the launch's logical_core.Turnstile (lnc == 2)
        # A launch of several ranks (collectives.py: each rank a logical core
        # of `lnc` physical cores, all traced into this one program).
        self.nranks = 1
        self._rank = 0
        self.ranks = None  # the launch's collectives.RankScheduler
        # LNC=2: each instruction's (epoch, core). An epoch ends at each
        # barrier / sendrecv meeting; interleave_cores() merges the two cores'
        # instructions of an epoch, as the cores run them at the same time.
        self.epoch = 0
        self.instr_tags: list[tuple[int, int]] = []
        self.shared: dict = {}  # shared_hbm allocations, by allocation order
        self.ninstr = 0
        self.prints: list = []  # nl.device_print: (prefix, constant, buffer)
        self.matmul_written: set = set()  # PSUM regions a matmul wrote (accumulate=None)

    @property
    def program_id(self) -> tuple:
        return getattr(self._per_thread, "program_id", self._program_id)

    @program_id.setter
    def program_id(self, value: tuple) -> None:
        self._per_thread.program_id = value
        self._program_id = value

    @property
    def shared_counter(self) -> int:
        return getattr(self._per_thread, "shared_counter", self._shared_counter)

    @shared_counter.setter
    def shared_counter(self, value: int) -> None:
        self._per_thread.shared_counter = value
        self._shared_counter = value

    @property
    def core(self) -> int:
        """The physical core the current program runs on (0 unless LNC=2)."""
        return self.program_id[0] if self.lnc > 1 else 0

    @property
    def rank(self) -> int:
        """The rank being traced (0 unless a multi-rank launch)."""
        return getattr(self._per_thread, "rank", self._rank)

    @rank.setter
    def rank(self, value: int) -> None:
        self._per_thread.rank = value
        self._rank = value

    @property
    def physical_core(self) -> int:
        """The core among all the launch's ranks' cores (its tiles' memory)."""
        return self.rank * self.lnc + self.core

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
        if not dtype.is_simulated:
            raise error(
                f"{dtype.name} tensors (MX packed types) are not supported yet", "dtype", loc
            )
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
        # HBM is one per rank: its buffers belong to the rank's first core
        # (the cost model runs HBM-only DMAs there).
        kw.setdefault("core", self.physical_core if space != HBM else self.rank * self.lnc)
        b = Buf(len(self.buffers), space, dtype, shape, name, self.loc_id(loc), **kw)
        self.buffers.append(b)
        return b

    def argument(self, dtype, shape, strides, name) -> View:
        b = self.new_buffer(
            HBM,
            dtype,
            shape,
            name,
            loc=("<argument>", 0, name),
            external=self.externals,
            initialized=True,
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
        if any(isinstance(v, View) and type(v.buf) is not Buf for v in (dst, *srcs)):
            # A dtype view (t.ap(..., dtype=X)) among the operands: bitcast.py.
            kw = dict(alu0=alu0, alu1=alu1, act=act, flags=flags, keep=keep, imm=imm)
            return _bitcast.emit_through(
                self, op, engine, dst, srcs, dict(kw, loc=loc, oob_skip=oob_skip)
            )
        if any(isinstance(v, View) and v.dtype in dt.MX_PACKED for v in (dst, *srcs)):
            from .mx import check_packed_operands

            check_packed_operands(op, dst, srcs, loc)
        for v in (dst, *srcs):
            if isinstance(v, View) and v.buf.pending_zero is not None:
                self.flush_zero(v.buf)
        if op != "dma_dynamic" and any(
            isinstance(v, View) and v.dyn is not None for v in (dst, *srcs)
        ):
            # A DMA with a run-time index: the simulator's dynamic DMA.
            srcs, flags, keep, imm = dynamic_dma(op, engine, dst, srcs, flags, oob_skip, loc)
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
        self.instr_tags.append((self.epoch, self.physical_core))
        idx = self.ninstr
        self.ninstr += 1
        if isinstance(dst, View):
            if dst.buf.kind == "input":
                # NKI kernels write their output arguments in place (NKI-lib
                # takes its outputs as arguments, annotated or not): the
                # launch learns which ones from here (CompiledKernel.written).
                dst.buf.written = True
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

    def interleave_cores(self) -> None:
        """LNC=2: the turnstile records core 0's instructions of an epoch,
        then core 1's; the two cores run theirs at the same time. Merges each
        epoch's two streams one instruction from each in turn, keeping each
        core's own order and every barrier boundary, so that what one core
        does early in an epoch (zeroing an output) is not recorded after what
        the other does late in it — the order the hardware never produces.
        (Two cores writing the same HBM within an epoch is a race on hardware;
        this is its most likely outcome.) Call once, after tracing."""
        if self.lnc * self.nranks < 2 or not self.ninstr:
            return
        # Two cores touching the same HBM in one epoch, one writing: an error
        # (hbm_races.py), checked while the records are in traced order.
        from . import hbm_races

        hbm_races.check(self)
        rank: dict = {}
        keys = []
        # A loop or if_else of one core (control_flow.py) stays one block: it
        # takes one turn, and its branches then keep their meaning.
        block = control_flow_block_of(self)
        for i, (epoch, core) in enumerate(self.instr_tags):
            if block.get(i, -1) >= 0 and block.get(i - 1, -1) == block[i]:
                keys.append((epoch, keys[-1][1], core, i))
                continue
            r = rank.get((epoch, core), 0)
            rank[(epoch, core)] = r + 1
            keys.append((epoch, r, core, i))
        order = [k[3] for k in sorted(keys)]
        if order == list(range(self.ninstr)):
            return
        remap_branches(self, order)
        w, n = self.words, layout.INSTRUCTION_WORDS
        m, imms = layout.IMMEDIATES, self.imms
        self.words = [x for i in order for x in w[i * n : (i + 1) * n]]
        self.imms = [x for i in order for x in imms[i * m : (i + 1) * m]]
        self.instr_locs = [self.instr_locs[i] for i in order]
        self.instr_tags = [self.instr_tags[i] for i in order]

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
        # `value` becomes a view of `target`, and what reads it afterwards (an
        # activation's reduce_res, the kernel) reads target's memory: where two
        # positions of target are one element (a zero step, overlapping steps)
        # that memory keeps one value of several. The result stays in its tile.
        if not writes_each_element_once(target):
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
        if target.buf.kind == "input":
            target.buf.written = True
        value.alias(target)
        return True


def writes_each_element_once(v: View) -> bool:
    """Whether no two positions of ``v`` address the same element: its steps,
    smallest first, each pass everything the smaller ones reach (a sufficient
    test; a step of 0 over more than one position fails it)."""
    reach = 0
    dims = sorted((abs(s), n) for n, s in zip(v.shape, v.strides, strict=True) if n > 1)
    for step, n in dims:
        if step <= reach:
            return False
        reach += step * (n - 1)
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
