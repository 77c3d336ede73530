"""``nki.collectives``: collective communication between the ranks of a
launch (each rank a logical NeuronCore, on simulated chips), and the launch
of a kernel on several ranks, ``run_ranks``.

A multi-rank launch traces every rank into one tile program, as an LNC=2
launch traces its two cores (logical_core.py): each (rank, core) program
runs on its own thread, one at a time (a scheduler hands the turn over when
a program reaches a collective, a barrier or a sendrecv), and each rank has
its own arguments, HBM (``nl.shared_hbm`` is per rank: shared by the cores
of its logical core), SBUF and PSUM. A collective is a meeting: when the
last member of its rank-list reaches it, its data movement is recorded as
DMAs between the members' tensors (flagged as collective transfers for the
cost model), between the epochs before and after it. The simulator then
runs the whole program: the data moves as on the hardware, and every
rank's results come back.

Collectives pair positionally per physical core: the Nth collective of
core c of one rank meets the Nth of core c of the other members of its
rank-list (at LNC=2 the two cores of a rank each take part in their own
plane, as NKI-lib's tiled kernels split their tiles over the cores).
Members that disagree (another collective, other shapes, another rank-list)
and members that finish without reaching it are ``NKIError``s naming the
kernel lines, never a hang.
"""

from __future__ import annotations

import enum
import inspect
import os
import threading

import numpy as np

from . import layout, trace_state
from .errors import NKIError
from .logical_core import run_programs
from .trace_state import HBM, PSUM, SBUF, current, error, user_location
from .view import View

__all__ = [
    "ReplicaGroup",
    "rg_partition_op",
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "collective_permute",
    "collective_permute_implicit",
    "collective_permute_implicit_reduce",
    "collective_permute_implicit_current_processing_rank_id",
    "rank_id",
    "run_ranks",
    "run_distributed",
]

# Per-rank shared_hbm allocations: each rank's counter starts here (the Nth
# shared_hbm allocation of a rank's cores is one tensor; ranks differ).
_SHARED_KEY_STRIDE = 1 << 40
# The simulator's physical cores per program (kMaxCores, program.h).
_MAX_CORES = 64


# Replica groups ------------------------------------------------------------
class rg_partition_op(enum.Enum):  # noqa: N801 (NKI's name)
    """How ``ReplicaGroup.from_partition_op`` maps a rank to its rank-list."""

    bitwise_and = "bitwise_and"
    div = "div"
    mod = "mod"


class ReplicaGroup:
    """The ranks a collective runs on, as rank-lists: the collective runs
    independently within each list, all lists at once; a rank belongs to
    at most one list (NKI's ``ReplicaGroup``)."""

    def __init__(self, groups=None, **kwargs):
        if groups is None:
            groups = kwargs.pop("replica_groups", kwargs.pop("groups", None))
        if groups is None:
            raise TypeError("ReplicaGroup takes its rank-lists: ReplicaGroup([[0, 1], [2, 3]])")
        try:
            lists = tuple(tuple(int(r) for r in g) for g in groups)
        except TypeError:
            raise TypeError(f"ReplicaGroup takes a list of rank-lists, got {groups!r}") from None
        seen: set = set()
        for g in lists:
            if not g:
                raise ValueError("ReplicaGroup: an empty rank-list")
            for r in g:
                if r < 0:
                    raise ValueError(f"ReplicaGroup: negative rank {r}")
                if r in seen:
                    raise ValueError(f"ReplicaGroup: rank {r} is in more than one rank-list")
                seen.add(r)
        self.groups = lists

    @staticmethod
    def from_partition_op(world_size: int, op, operand: int) -> ReplicaGroup:
        op = rg_partition_op(op.value if isinstance(op, enum.Enum) else op)
        fn = {
            rg_partition_op.bitwise_and: lambda r: r & operand,
            rg_partition_op.div: lambda r: r // operand,
            rg_partition_op.mod: lambda r: r % operand,
        }[op]
        lists: dict = {}
        for r in range(int(world_size)):
            lists.setdefault(fn(r), []).append(r)
        return ReplicaGroup([lists[k] for k in sorted(lists)])

    def list_of(self, rank: int):
        for g in self.groups:
            if rank in g:
                return g
        return None

    def __eq__(self, other) -> bool:
        return isinstance(other, ReplicaGroup) and self.groups == other.groups

    def __hash__(self) -> int:
        return hash(("ReplicaGroup", self.groups))

    def __repr__(self) -> str:
        return f"ReplicaGroup({[list(g) for g in self.groups]})"


class RankId(int):
    """A rank id (NKI returns it in a register). Each rank is traced on its
    own, so the value is known when the kernel is traced: it works as
    ``ap(scalar_offset=...)`` and in Python arithmetic."""

    def __repr__(self) -> str:
        return f"RankId({int(self)})"


def rank_id() -> RankId:
    """The rank running the kernel (0 at a launch of one rank)."""
    t = current()
    return RankId(t.rank)


def _where(loc) -> str:
    return f"{os.path.basename(loc[0])}:{loc[1]}"


# The scheduler ---------------------------------------------------------------
class _Aborted(BaseException):
    """Unwinds a program's thread when another one failed."""


class _Arrival:
    __slots__ = ("who", "kind", "loc", "data", "done")

    def __init__(self, who, kind, loc, data):
        self.who = who  # (rank, core)
        self.kind = kind
        self.loc = loc
        self.data = data
        self.done = False


class _Meeting:
    __slots__ = ("members", "arrivals", "action")

    def __init__(self, members, action):
        self.members = members  # the (rank, core) programs that must arrive
        self.arrivals: dict = {}
        self.action = action  # called with the arrivals once all are in


class RankScheduler:
    """The (rank, core) programs of a multi-rank launch, traced one at a
    time: a program runs until it reaches a meeting (a collective, a
    barrier, a sendrecv) or ends, then the lowest-numbered program that can
    run takes over. When none can and some are waiting, the launch is
    deadlocked: an ``NKIError`` naming each waiting program's line."""

    def __init__(self, trace, nranks: int, lnc: int):
        self.trace = trace
        self.nranks = nranks
        self.lnc = lnc
        n = nranks * lnc
        self.cond = threading.Condition()
        self.turn = 0
        self.finished = [False] * n
        self.waiting: list[_Arrival | None] = [None] * n
        self.aborted = False
        self.errors: list = [None] * n
        self.results: list = [None] * nranks
        self.meetings: dict = {}
        self.counts: dict = {}  # (program, plane) -> meetings reached so far

    def _index(self, rank, core) -> int:
        return rank * self.lnc + core

    # Running ------------------------------------------------------------
    def run(self, fn, per_rank_args) -> list:
        t = self.trace
        t.ranks = self
        if self.lnc > 1:
            t.cores = self  # core_barrier / sendrecv meet here too
        programs = [
            (f"nki-rank-{r}-core-{c}", self._main, (r, c, fn, *per_rank_args[r]))
            for r in range(self.nranks)
            for c in range(self.lnc)
        ]
        try:
            run_programs(self, programs, "a multi-rank kernel's programs")
        finally:
            t.ranks = None
            t.cores = None
        return self.results

    def _main(self, rank, core, fn, args, kwargs):
        t = self.trace
        me = self._index(rank, core)
        trace_state.state.trace = t
        t.rank = rank
        t.program_id = (core,) if self.lnc > 1 else ()
        t.shared_counter = rank * _SHARED_KEY_STRIDE
        try:
            with self.cond:
                while self.turn != me and not self.aborted:
                    self.cond.wait()
                if self.aborted:
                    return
            ret = fn(*args, **kwargs)
            if core == 0:
                self.results[rank] = ret
        except _Aborted:
            pass
        except BaseException as e:  # noqa: BLE001 (re-raised by run())
            self.errors[me] = e
            with self.cond:
                self.aborted = True
                self.cond.notify_all()
        finally:
            with self.cond:
                self.finished[me] = True
                if not self.aborted:
                    self._hand_over()
                self.cond.notify_all()
            trace_state.state.trace = None

    def _hand_over(self) -> None:
        """Gives the turn to the lowest program that can run (under cond)."""
        n = len(self.finished)
        for i in range(n):
            if not self.finished[i] and self.waiting[i] is None:
                self.turn = i
                return
        if all(self.finished):
            return
        # Everyone left is waiting on a meeting that cannot happen.
        waiting = [a for a in self.waiting if a is not None]
        first = waiting[0]
        lines = []
        for a in waiting:
            r, c = a.who
            lines.append(
                f"rank {r}{f' core {c}' if self.lnc > 1 else ''} waits at {a.kind} "
                f"({_where(a.loc)})"
            )
        missing = []
        for m in self.meetings.values():
            for r, c in m.members:
                i = self._index(r, c)
                if (r, c) not in m.arrivals and self.finished[i]:
                    missing.append(
                        f"rank {r}{f' core {c}' if self.lnc > 1 else ''} finished without "
                        f"reaching it"
                    )
        detail = "; ".join(lines + sorted(set(missing)))
        self.errors[self._index(*first.who)] = error(
            f"{first.kind}: not every member of its rank-list reaches a matching call "
            f"(deadlock): {detail}. Every rank of a rank-list must make the same "
            "collectives in the same order",
            "deadlock",
            first.loc,
        )
        self.aborted = True

    def meet(self, key, members, kind, loc, data, action, check=None) -> None:
        """The calling program arrives at meeting ``key`` of ``members``;
        returns once the meeting happened and it is this program's turn."""
        t = self.trace
        who = (t.rank, t.core)
        me = self._index(*who)
        arrival = _Arrival(who, kind, loc, data)
        with self.cond:
            if self.aborted:
                raise _Aborted
            m = self.meetings.get(key)
            if m is None:
                m = self.meetings[key] = _Meeting(members, action)
            if check is not None and m.arrivals:
                check(next(iter(m.arrivals.values())), arrival)
            m.arrivals[who] = arrival
            if len(m.arrivals) == len(m.members):
                del self.meetings[key]
                t.epoch += 1
                m.action([m.arrivals[w] for w in m.members])
                t.epoch += 1
                for a in m.arrivals.values():
                    a.done = True
                    self.waiting[self._index(*a.who)] = None
            else:
                self.waiting[me] = arrival
            self._hand_over()
            self.cond.notify_all()
            while not self.aborted:
                if arrival.done and self.turn == me:
                    return
                self.cond.wait()
            raise _Aborted

    def next_count(self, plane) -> int:
        t = self.trace
        key = (t.rank, t.core, plane)
        k = self.counts.get(key, 0)
        self.counts[key] = k + 1
        return k

    # nisa.core_barrier / nisa.sendrecv between a rank's two cores --------
    def sync(self, kind, loc, src=None, dst=None) -> None:
        from .logical_core import _exchange, _Sync

        t = self.trace
        rank = t.rank
        k = self.next_count("cores")
        members = [(rank, c) for c in range(self.lnc)]

        def check(first, a):
            if first.kind != a.kind:
                raise error(
                    f"nisa.{a.kind} on core {a.who[1]} meets nisa.{first.kind} on core "
                    f"{first.who[1]} (at {_where(first.loc)}): the two cores of an LNC=2 "
                    "kernel must make the same barriers and sendrecvs, in the same order "
                    "(deadlock)",
                    "deadlock",
                    a.loc,
                )

        def action(arrivals):
            if kind == "sendrecv":
                s = [_Sync("sendrecv", a.loc, *a.data) for a in arrivals]
                _exchange(t, s[0], s[1])

        self.meet(("cores", rank, k), members, f"nisa.{kind}", loc, (src, dst), action, check)


# Collective transfers ----------------------------------------------------------
def _flag_collective() -> int:
    return layout.FLAGS.get("collective", 0)


def _transfer(t, dst: View, src: View, op, loc, steps: float, scale: float) -> None:
    """One DMA of a collective (into ``dst``'s rank), flagged for the cost
    model: ``steps`` (the algorithm's sequential steps, on the first transfer
    into a rank), ``scale`` (the algorithm's bytes over this transfer's)."""
    from .legacy_isa import _dma, oob_mode

    _dma(dst, src, None, op, oob_mode.error, loc)
    flag = _flag_collective()
    if flag:
        idx = t.ninstr - 1
        t.words[idx * layout.INSTRUCTION_WORDS + t._FLAGS_WORD] |= flag
        base = idx * layout.IMMEDIATES
        t.imms[base : base + 3] = [float(steps), float(t.lnc), float(scale)]


def _stage(t, v: View, loc) -> View:
    """A copy of ``v`` in its rank's HBM (a source a collective also
    writes is read before any write, as the transfers happen at once)."""
    from .legacy_isa import _dma, oob_mode

    b = t.new_buffer(HBM, v.dtype, v.shape, loc=loc, kind="scratch", core=v.buf.core)
    staged = View.contiguous(b)
    _dma(staged, v, None, None, oob_mode.error, loc)
    return staged


def _chunk(v: View, dim: int, k: int, n: int) -> View:
    size = v.shape[dim] // n
    shape = v.shape[:dim] + (size,) + v.shape[dim + 1 :]
    return View(v.buf, v.offset + k * size * v.strides[dim], shape, v.strides)


# Argument checks ----------------------------------------------------------------
def _tensors(name: str, value, loc) -> list:
    if isinstance(value, View):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise error(f"{name} takes a list of tensors, got {value!r}", "operand", loc)
    for v in value:
        if not isinstance(v, View):
            raise error(f"{name}: {type(v).__name__} is not a kernel tensor", "operand", loc)
        v.static_only(f"a collective's {name}", loc)
        if v.buf.space == PSUM:
            raise error(f"{name}: collectives move HBM or SBUF tensors, not PSUM", "memory", loc)
        if v.buf.space == HBM and v.buf.kind in ("input", "output"):
            raise error(
                f"{name}: a collective cannot read or write a kernel argument or result "
                "(copy it into an nl.ndarray(..., buffer=nl.shared_hbm) first, as NKI asks)",
                "operand",
                loc,
            )
    return list(value)


def _spaces(srcs, dsts, loc, what: str, coalesce_sbuf: bool = False):
    spaces = {v.buf.space for v in (*srcs, *dsts)}
    if len(spaces) > 1:
        raise error(
            f"{what}: the tensors must all be in HBM or all in SBUF, not a mix",
            "memory",
            loc,
        )
    space = spaces.pop()
    if len(srcs) != len(dsts):
        raise error(f"{what}: {len(srcs)} sources and {len(dsts)} destinations", "operand", loc)
    if space == SBUF and len(srcs) > 1 and not coalesce_sbuf:
        raise error(
            f"{what}: several tensors in one collective (coalesced) are supported in HBM only",
            "operand",
            loc,
        )
    return space


def _my_list(replica_group, t, loc, what: str):
    if not isinstance(replica_group, ReplicaGroup):
        try:
            replica_group = ReplicaGroup(replica_group)
        except (TypeError, ValueError) as e:
            raise error(f"{what}: {e}", "operand", loc) from None
    for g in replica_group.groups:
        for r in g:
            if r >= t.nranks:
                raise error(
                    f"{what}: the replica group {replica_group!r} names rank {r}, but the "
                    f"launch has {t.nranks} rank{'s' if t.nranks != 1 else ''} "
                    "(launch the ranks with nki.collectives.run_ranks)",
                    "operand",
                    loc,
                )
    group = replica_group.list_of(t.rank)
    if group is None:
        raise error(
            f"{what}: rank {t.rank} is in no rank-list of the replica group {replica_group!r}",
            "operand",
            loc,
        )
    return group


def _dim(collective_dim, v: View, space, loc, what: str) -> int:
    d = int(collective_dim)
    if space == HBM and d != 0:
        raise error(
            f"{what}: collective_dim={d}; for HBM tensors only 0 is supported (NKI's rule)",
            "operand",
            loc,
        )
    if not 0 <= d < v.ndim:
        raise error(f"{what}: collective_dim={d} for a tensor of rank {v.ndim}", "operand", loc)
    return d


def _describe(v: View) -> str:
    return f"{list(v.shape)} {v.dtype.name}"


def _collective(kind, group, loc, data, action, signature) -> None:
    """Arrives at this program's next collective of its plane."""
    t = current()
    if t.ranks is None:
        # A launch of one rank: a rank-list of itself only.
        if len(group) != 1:
            raise error(
                f"{kind}: the replica group has {len(group)} ranks but this launch is of one "
                "rank; launch the kernel on every rank with nki.collectives.run_ranks",
                "operand",
                loc,
            )
        arrival = _Arrival((0, t.core), kind, loc, data)
        t.epoch += 1
        action([arrival])
        t.epoch += 1
        return
    sched = t.ranks
    plane = ("cc", t.core)
    k = sched.next_count(plane)
    members = [(r, t.core) for r in group]

    def check(first, a):
        if first.kind != a.kind or signature(first) != signature(a):
            raise error(
                f"{a.kind} on rank {a.who[0]} ({signature(a)}) meets {first.kind} on rank "
                f"{first.who[0]} at {_where(first.loc)} ({signature(first)}): the ranks of "
                "a rank-list must make the same collectives, with matching tensors, in the "
                "same order",
                "deadlock" if first.kind != a.kind else "shape",
                a.loc,
            )

    sched.meet(("cc", t.core, tuple(group), k), members, kind, loc, data, action, check)


def _shapes_sig(a) -> str:
    srcs, dsts = a.data[0], a.data[1]
    return f"srcs {[_describe(v) for v in srcs]}, dsts {[_describe(v) for v in dsts]}" + (
        f", {a.data[2:]!r}" if len(a.data) > 2 else ""
    )


def _staged_sources(t, arrivals, loc):
    """Each member's sources, staged when a destination of the collective
    is also a source (in place)."""
    written = {v.buf.index for a in arrivals for v in a.data[1]}
    out = []
    for a in arrivals:
        out.append([_stage(t, v, a.loc) if v.buf.index in written else v for v in a.data[0]])
    return out


# The collectives ------------------------------------------------------------------
def all_reduce(srcs, dsts, replica_group, op, **kwargs) -> None:
    """Every member's ``dsts[i]`` becomes ``op`` (``nl.add``,
    ``nl.maximum``, ``nl.minimum``) over the members' ``srcs[i]``, in
    rank-list order."""
    loc = user_location()
    t = current()
    what = "ncc.all_reduce"
    srcs, dsts = _tensors("srcs", srcs, loc), _tensors("dsts", dsts, loc)
    _spaces(srcs, dsts, loc, what)
    for s, d in zip(srcs, dsts, strict=True):
        if s.shape != d.shape or s.dtype != d.dtype:
            raise error(f"{what}: source {_describe(s)}, destination {_describe(d)}", "shape", loc)
    group = _my_list(replica_group, t, loc, what)
    from . import language as nl

    nl._alu_code(op, loc)  # an unknown op fails here, at the call
    n = len(group)

    def action(arrivals):
        src_of = _staged_sources(t, arrivals, loc)
        for a in arrivals:
            for i in range(len(a.data[1])):
                dst = a.data[1][i]
                scale = 2.0 * (n - 1) / (n * n) if n > 1 else 0.0
                for k in range(n):
                    _transfer(
                        t,
                        dst,
                        src_of[k][i],
                        None if k == 0 else op,
                        a.loc,
                        2 * (n - 1) if k == 0 and i == 0 else 0,
                        scale,
                    )

    _collective(what, group, loc, (srcs, dsts, _op_name(op)), action, _shapes_sig)


def all_gather(srcs, dsts, replica_group, collective_dim=0, **kwargs) -> None:
    """Every member's ``dsts[i]`` becomes the members' ``srcs[i]``
    concatenated along ``collective_dim``, in rank-list order."""
    loc = user_location()
    t = current()
    what = "ncc.all_gather"
    srcs, dsts = _tensors("srcs", srcs, loc), _tensors("dsts", dsts, loc)
    space = _spaces(srcs, dsts, loc, what)
    group = _my_list(replica_group, t, loc, what)
    n = len(group)
    d = _dim(collective_dim, dsts[0], space, loc, what)
    for s, o in zip(srcs, dsts, strict=True):
        want = s.shape[:d] + (s.shape[d] * n,) + s.shape[d + 1 :]
        if o.shape != want or s.dtype != o.dtype:
            raise error(
                f"{what}: {n} ranks' sources {_describe(s)} along dimension {d} make "
                f"{list(want)} {s.dtype.name}, the destination is {_describe(o)}",
                "shape",
                loc,
            )

    def action(arrivals):
        src_of = _staged_sources(t, arrivals, loc)
        for a in arrivals:
            for i, dst in enumerate(a.data[1]):
                for k in range(n):
                    _transfer(
                        t,
                        _chunk(dst, d, k, n),
                        src_of[k][i],
                        None,
                        a.loc,
                        n - 1 if k == 0 and i == 0 else 0,
                        1.0 if k != group.index(a.who[0]) else 0.0,
                    )

    _collective(what, group, loc, (srcs, dsts, d), action, _shapes_sig)


def reduce_scatter(srcs, dsts, replica_group, op, collective_dim=0, **kwargs) -> None:
    """Member ``k``'s ``dsts[i]`` becomes ``op`` over the members' chunk
    ``k`` of ``srcs[i]`` (split in rank-list size chunks along
    ``collective_dim``)."""
    loc = user_location()
    t = current()
    what = "ncc.reduce_scatter"
    srcs, dsts = _tensors("srcs", srcs, loc), _tensors("dsts", dsts, loc)
    space = _spaces(srcs, dsts, loc, what)
    group = _my_list(replica_group, t, loc, what)
    n = len(group)
    d = _dim(collective_dim, srcs[0], space, loc, what)
    from . import language as nl

    nl._alu_code(op, loc)
    for s, o in zip(srcs, dsts, strict=True):
        want = o.shape[:d] + (o.shape[d] * n,) + o.shape[d + 1 :]
        if s.shape != want or s.dtype != o.dtype:
            raise error(
                f"{what}: the source {_describe(s)} must be {n} destinations "
                f"{_describe(o)} along dimension {d}",
                "shape",
                loc,
            )

    def action(arrivals):
        src_of = _staged_sources(t, arrivals, loc)
        for j, a in enumerate(arrivals):
            for i, dst in enumerate(a.data[1]):
                for k in range(n):
                    _transfer(
                        t,
                        dst,
                        _chunk(src_of[k][i], d, j, n),
                        None if k == 0 else op,
                        a.loc,
                        n - 1 if k == 0 and i == 0 else 0,
                        (n - 1) / n if n > 1 else 0.0,
                    )

    _collective(what, group, loc, (srcs, dsts, d, _op_name(op)), action, _shapes_sig)


def all_to_all(srcs, dsts, replica_group, collective_dim=0, **kwargs) -> None:
    """Member ``j``'s chunk ``k`` of ``dsts[i]`` becomes member ``k``'s
    chunk ``j`` of ``srcs[i]`` (rank-list size chunks along
    ``collective_dim``)."""
    loc = user_location()
    t = current()
    what = "ncc.all_to_all"
    srcs, dsts = _tensors("srcs", srcs, loc), _tensors("dsts", dsts, loc)
    space = _spaces(srcs, dsts, loc, what)
    group = _my_list(replica_group, t, loc, what)
    n = len(group)
    d = _dim(collective_dim, srcs[0], space, loc, what)
    for s, o in zip(srcs, dsts, strict=True):
        if s.shape != o.shape or s.dtype != o.dtype or s.shape[d] % n:
            raise error(
                f"{what}: source {_describe(s)} and destination {_describe(o)} must match "
                f"and split in {n} along dimension {d}",
                "shape",
                loc,
            )

    def action(arrivals):
        src_of = _staged_sources(t, arrivals, loc)
        for j, a in enumerate(arrivals):
            for i, dst in enumerate(a.data[1]):
                for k in range(n):
                    _transfer(
                        t,
                        _chunk(dst, d, k, n),
                        _chunk(src_of[k][i], d, j, n),
                        None,
                        a.loc,
                        1 if k == 0 and i == 0 else 0,
                        1.0 if k != j else 0.0,
                    )

    _collective(what, group, loc, (srcs, dsts, d), action, _shapes_sig)


def collective_permute(srcs, dsts, source_target_pairs, replica_group=None, **kwargs) -> None:
    """For each ``(source, target)`` pair, ``dsts`` of the target rank
    becomes ``srcs`` of the source rank (HBM tensors; every rank of the
    launch, or of ``replica_group``'s rank-list, calls it)."""
    loc = user_location()
    t = current()
    what = "ncc.collective_permute"
    srcs, dsts = _tensors("srcs", srcs, loc), _tensors("dsts", dsts, loc)
    space = _spaces(srcs, dsts, loc, what)
    if space != HBM or len(srcs) != 1:
        raise error(f"{what}: one HBM source and one HBM destination (NKI's rule)", "operand", loc)
    if replica_group is not None:
        group = _my_list(replica_group, t, loc, what)
    else:
        group = tuple(range(t.nranks))
    pairs = tuple((int(a), int(b)) for a, b in source_target_pairs)
    for a, b in pairs:
        if a not in group or b not in group:
            raise error(
                f"{what}: the pair ({a}, {b}) names a rank outside {list(group)}", "operand", loc
            )
    if len({b for _, b in pairs}) != len(pairs):
        raise error(f"{what}: a rank receives from two sources in {list(pairs)}", "operand", loc)
    if srcs[0].shape != dsts[0].shape or srcs[0].dtype != dsts[0].dtype:
        raise error(
            f"{what}: source {_describe(srcs[0])}, destination {_describe(dsts[0])}", "shape", loc
        )

    def action(arrivals):
        by_rank = {a.who[0]: a for a in arrivals}
        src_of = dict(zip(group, _staged_sources(t, arrivals, loc), strict=True))
        for s, r in pairs:
            _transfer(t, by_rank[r].data[1][0], src_of[s][0], None, by_rank[r].loc, 1, 1.0)

    _collective(what, group, loc, (srcs, dsts, pairs), action, _shapes_sig)


def _channels(name, value, loc) -> list:
    if not isinstance(value, (list, tuple)) or not value:
        raise error(f"{name} takes one list of tensors per channel", "operand", loc)
    out = []
    for c in value:
        ts = _tensors(name, c, loc)
        if len(ts) != 1:
            raise error(
                f"{name}: exactly one tensor per channel (coalesced collective communication "
                "is not supported, as in NKI)",
                "operand",
                loc,
            )
        out.append(ts[0])
    return out


def _ring(group, rank) -> tuple[int, int]:
    """(predecessor, successor) of ``rank`` in its rank-list's ring."""
    i = group.index(rank)
    n = len(group)
    return group[(i - 1) % n], group[(i + 1) % n]


def _implicit(what, srcs0, srcs1, dsts, replica_group, op, channel_ids, loc) -> None:
    t = current()
    if len({len(srcs0), len(dsts)} | ({len(srcs1)} if srcs1 is not None else set())) != 1:
        raise error(f"{what}: one source and one destination per channel", "operand", loc)
    ids = list(channel_ids) if channel_ids is not None else list(range(len(dsts)))
    if len(ids) != len(dsts):
        raise error(f"{what}: {len(ids)} channel_ids for {len(dsts)} channels", "operand", loc)
    for lst in (srcs0, dsts) if srcs1 is None else (srcs0, srcs1, dsts):
        _spaces(lst, lst, loc, what, coalesce_sbuf=True)
    for k, (s, o) in enumerate(zip(srcs0, dsts, strict=True)):
        if (
            s.shape != o.shape
            or s.dtype != o.dtype
            or (srcs1 is not None and (srcs1[k].shape != s.shape or srcs1[k].dtype != s.dtype))
        ):
            raise error(
                f"{what}: channel {ids[k]}: source {_describe(s)}, destination {_describe(o)}",
                "shape",
                loc,
            )
    group = _my_list(replica_group, t, loc, what)

    def action(arrivals):
        written = {v.buf.index for a in arrivals for v in a.data[2]}

        def staged(v, a):
            return _stage(t, v, a.loc) if v.buf.index in written else v

        src0 = {a.who[0]: [staged(v, a) for v in a.data[0]] for a in arrivals}
        src1 = (
            {a.who[0]: [staged(v, a) for v in a.data[1]] for a in arrivals}
            if srcs1 is not None
            else None
        )
        for a in arrivals:
            pred, _ = _ring(group, a.who[0])
            for c, dst in enumerate(a.data[2]):
                first = 1 if c == 0 else 0
                _transfer(t, dst, src0[pred][c], None, a.loc, first, 1.0)
                if src1 is not None:
                    _transfer(t, dst, src1[pred][c], op, a.loc, 0, 0.0)

    data = (srcs0, srcs1 if srcs1 is not None else [], dsts, tuple(ids))
    _collective(
        what,
        group,
        loc,
        data,
        action,
        lambda a: f"channels {[_describe(v) for v in a.data[2]]}, ids {list(a.data[3])}",
    )


def collective_permute_implicit(
    srcs_by_channel, dsts_by_channel, replica_group, channel_ids=None, **kwargs
) -> None:
    """Each member sends each channel's source to its successor in the
    rank-list's ring and receives its predecessor's into the channel's
    destination."""
    loc = user_location()
    what = "ncc.collective_permute_implicit"
    srcs = _channels("srcs_by_channel", srcs_by_channel, loc)
    dsts = _channels("dsts_by_channel", dsts_by_channel, loc)
    _implicit(what, srcs, None, dsts, replica_group, None, channel_ids, loc)


def collective_permute_implicit_reduce(
    srcs0_by_channel,
    srcs1_by_channel,
    dsts_by_channel,
    replica_group,
    op,
    channel_ids=None,
    **kwargs,
) -> None:
    """As ``collective_permute_implicit``, sending ``op(srcs0, srcs1)`` of
    each channel."""
    loc = user_location()
    what = "ncc.collective_permute_implicit_reduce"
    from . import language as nl

    nl._alu_code(op, loc)
    s0 = _channels("srcs0_by_channel", srcs0_by_channel, loc)
    s1 = _channels("srcs1_by_channel", srcs1_by_channel, loc)
    dsts = _channels("dsts_by_channel", dsts_by_channel, loc)
    _implicit(what, s0, s1, dsts, replica_group, op, channel_ids, loc)


def collective_permute_implicit_current_processing_rank_id(
    iteration_id, replica_group, channel_id=0, num_channels=1, **kwargs
) -> RankId:
    """The rank whose data a ring algorithm holds at ``iteration_id``: this
    rank at 0, then its predecessors in turn (every channel's ring runs the
    same way)."""
    loc = user_location()
    t = current()
    group = _my_list(
        replica_group, t, loc, "ncc.collective_permute_implicit_current_processing_rank_id"
    )
    i = group.index(t.rank)
    return RankId(group[(i - int(iteration_id)) % len(group)])


def _op_name(op) -> str:
    return getattr(op, "__name__", str(op))


# Launching a kernel on several ranks ------------------------------------------------
def run_ranks(kernel, inputs, num_ranks: int | None = None):
    """Runs ``kernel`` (``k`` or ``k[lnc]``) on every rank of a launch, in
    this process: ``inputs`` is a list of each rank's arguments (a dict of
    keyword arguments, or a tuple of positional ones), or a function of the
    rank returning them (then ``num_ranks`` says how many). Tensors are NumPy
    arrays or torch tensors (all on one device). Returns each rank's
    results, in rank order."""
    from . import kernel as K

    kern, grid = K.as_kernel(kernel)
    if callable(inputs) and not isinstance(inputs, (list, tuple)):
        if num_ranks is None:
            raise TypeError("run_ranks: num_ranks is needed when inputs is a function")
        inputs = [inputs(r) for r in range(int(num_ranks))]
    inputs = list(inputs)
    if num_ranks is not None and len(inputs) != int(num_ranks):
        raise ValueError(f"run_ranks: {len(inputs)} ranks' inputs for num_ranks={num_ranks}")
    if not inputs:
        raise ValueError("run_ranks: no ranks")
    per_rank = []
    sig = inspect.signature(kern.fn)
    for args in inputs:
        a, kw = (tuple(args), {}) if not isinstance(args, dict) else ((), dict(args))
        try:
            bound = sig.bind(*a, **kw)
        except TypeError as e:
            raise TypeError(f"{kern.fn.__qualname__}: {e}") from None
        bound.apply_defaults()
        per_rank.append(bound)
    ck = _compiled(kern, grid, per_rank)
    tensors = []
    for bound in per_rank:
        tensors += [v for v in bound.arguments.values() if K._describe(v).kind == "tensor"]
    return _run(ck, tensors, per_rank)


class _MultiRankKernel:
    """A multi-rank trace: the program and each rank's result structure."""

    def __init__(self, ck, structures, outputs_per_rank, args_per_rank):
        self.ck = ck
        self.structures = structures
        self.outputs_per_rank = outputs_per_rank
        self.args_per_rank = args_per_rank


def _compiled(kern, grid, per_rank) -> _MultiRankKernel:
    from . import kernel as K

    key = (
        "ranks",
        grid,
        tuple(tuple((n, K._arg_key(v)) for n, v in b.arguments.items()) for b in per_rank),
    )
    with kern._lock:
        mk = kern._cache.get(key)
    if mk is None:
        mk = _trace_ranks(kern, grid, per_rank)
        with kern._lock:
            kern._cache[key] = mk
    kern.last_profile = mk.ck.profile()
    return mk


def _trace_ranks(kern, grid, per_rank) -> _MultiRankKernel:
    from . import kernel as K
    from . import language  # noqa: F401  (tile operators)
    from .logical_core import is_lnc_launch
    from .trace import Trace

    if grid and not is_lnc_launch(grid):
        raise NKIError(
            f"a multi-rank launch takes a kernel or kernel[lnc] with lnc 1 or 2, got grid "
            f"{list(grid)}"
        )
    lnc = 2 if grid else 1
    nranks = len(per_rank)
    if nranks * lnc > _MAX_CORES:
        raise NKIError(
            f"a multi-rank launch of {nranks} ranks at LNC={lnc} needs {nranks * lnc} "
            f"physical cores; the simulator traces at most {_MAX_CORES} into one program"
        )
    t = Trace(grid, lnc=lnc)
    t.nranks = nranks
    prev = getattr(trace_state.state, "trace", None)
    trace_state.state.trace = t
    try:
        rank_args, views_per_rank, orders = [], [], []
        for r, bound in enumerate(per_rank):
            views, order = {}, []
            args = dict(bound.arguments)
            for name, value in bound.arguments.items():
                info = K._describe(value)
                if info.kind == "tensor":
                    v = t.argument(info.dtype, info.shape, info.strides, name)
                    v.buf.core = r * lnc
                    views[name] = v
                    order.append(name)
                    args[name] = v
            b2 = inspect.BoundArguments(bound.signature, args)
            rank_args.append((b2.args, b2.kwargs))
            views_per_rank.append(views)
            orders.append(order)
        results = RankScheduler(t, nranks, lnc).run(kern.fn, rank_args)
        structures, outputs_per_rank, shapes = [], [], {}
        for r in range(nranks):
            outs: list = []
            structures.append(
                K._result_structure(results[r], t, views_per_rank[r], orders[r], outs, shapes)
            )
            outputs_per_rank.append(outs)
        if t.prints:
            raise NKIError("nl.device_print in a multi-rank launch is not supported yet")
        ext = t.externals
        flat = []
        for outs in outputs_per_rank:
            for b in outs:
                b.external = ext
                b.kind = "output"
                ext += 1
                flat.append(b)
        t.interleave_cores()
        program = K._build(t, ext)
    finally:
        trace_state.state.trace = prev
    ck = K.CompiledKernel(
        name=kern.fn.__name__,
        program=program,
        num_args=t.externals,
        outputs=[(shapes[b], b.dtype) for b in flat],
        prints=[],
        result=None,
        trace_locs=t.locs,
        written=(),
    )
    counts = [len(o) for o in outputs_per_rank]
    return _MultiRankKernel(ck, structures, counts, [len(o) for o in orders])


def _run(mk: _MultiRankKernel, tensors, per_rank) -> list:
    from . import dtypes as dt
    from . import kernel as K

    ck = mk.ck
    if all(isinstance(x, np.ndarray) for x in tensors):
        outs = [np.empty(shape, dtype=dt.numpy_dtype(d)) for shape, d in ck.outputs]
        K._run_host(ck, [a.ctypes.data for a in tensors] + [o.ctypes.data for o in outs])
    elif all(K._is_torch_tensor(x) for x in tensors):
        import torch

        devices = {x.device for x in tensors}
        if len(devices) != 1:
            raise NKIError(
                f"a multi-rank launch's tensors must be on one device, got "
                f"{sorted(map(str, devices))}"
            )
        device = tensors[0].device
        outs = [
            torch.empty(shape, dtype=dt.torch_dtype(d), device=device) for shape, d in ck.outputs
        ]
        addrs = [x.data_ptr() for x in tensors] + [o.data_ptr() for o in outs]
        if device.type == "cpu":
            K._run_host(ck, addrs)
        elif device.type == "neuron":
            index = device.index if device.index is not None else torch.neuron.current_device()
            ck.program.launch(addrs, index, f"nki::{ck.name}", K._location_names(ck))
        else:
            raise NKIError(f"NKI kernels run on neuron (or CPU) tensors, not {device.type}")
    else:
        raise NKIError(
            "a multi-rank launch takes either torch tensors (all on one device) or NumPy "
            "arrays, not a mix"
        )
    results, o, a = [], 0, 0
    for r, structure in enumerate(mk.structures):
        n_out, n_arg = mk.outputs_per_rank[r], mk.args_per_rank[r]
        results.append(K._unflatten(structure, outs[o : o + n_out], tensors[a : a + n_arg]))
        o += n_out
        a += n_arg
    return results


# A torch.distributed job: each process one rank -------------------------------------
def _to_host(value):
    """A kernel argument as it crosses the process group: tensors as NumPy
    (bit-exact: bf16/fp8 as their bits, with the torch dtype to restore)."""
    from . import kernel as K

    if K._is_torch_tensor(value):
        t = value.detach().cpu().contiguous()
        bits = {2: "int16", 1: "uint8"}.get(t.element_size()) if t.is_floating_point() else None
        if bits and t.dtype.itemsize < 4 and str(t.dtype) != "torch.float16":
            import torch

            raw = t.view(getattr(torch, bits)).numpy().copy()
            return ("tensor_bits", raw, str(t.dtype).removeprefix("torch."))
        return ("tensor", t.numpy().copy(), None)
    return ("value", value, None)


def _from_host(item):
    kind, value, dtype = item
    if kind == "value":
        return value
    if kind == "tensor":
        return value
    import ml_dtypes

    return value.view(getattr(ml_dtypes, dtype))


def run_distributed(kernel, *args, group=None, **kwargs):
    """Runs ``kernel`` (``k`` or ``k[lnc]``) as this process's rank of a
    ``torch.distributed`` job: every rank of ``group`` (default: the world)
    calls it with its own arguments; the group's rank is the kernel's
    ``ncc.rank_id()``. The ranks' arguments cross the process group
    (``all_gather_object``), every process simulates the whole launch
    (``run_ranks``: the simulation is deterministic, so all agree) and
    returns its own rank's results, on its arguments' device. Arguments the
    kernel writes in place are not written back (only its results return)."""
    import torch
    import torch.distributed as dist

    rank = dist.get_rank(group)
    world = dist.get_world_size(group)
    mine = {
        "args": [_to_host(a) for a in args],
        "kwargs": {k: _to_host(v) for k, v in kwargs.items()},
    }
    every: list = [None] * world
    dist.all_gather_object(every, mine, group=group)
    from . import kernel as K

    sig = inspect.signature(K.as_kernel(kernel)[0].fn)
    inputs = []
    for r in range(world):
        a = tuple(_from_host(x) for x in every[r]["args"])
        kw = {k: _from_host(v) for k, v in every[r]["kwargs"].items()}
        inputs.append(dict(sig.bind(*a, **kw).arguments))
    results = run_ranks(kernel, inputs)
    device = next(
        (a.device for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None
    )

    def back(x):
        if isinstance(x, np.ndarray) and device is not None:
            name = x.dtype.name
            if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
                bits = np.uint16 if name == "bfloat16" else np.uint8
                td = getattr(torch, name)
                return torch.from_numpy(x.view(bits).copy()).view(td).to(device)
            return torch.from_numpy(np.ascontiguousarray(x)).to(device)
        if isinstance(x, (list, tuple)):
            return type(x)(back(v) for v in x)
        return x

    return back(results[rank])
