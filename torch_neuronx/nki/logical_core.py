"""Logical NeuronCores of two physical cores (LNC=2): ``kernel[2]`` traced as
the two cores run it, and the instructions between them,
``nisa.core_barrier`` and ``nisa.sendrecv``.

An LNC=2 launch runs the kernel once per physical core (``nl.program_id(0)``
is the core). Each core's program is traced on its own thread into the one
shared ``Trace``, one thread at a time (a turnstile): core 0 runs until it
reaches a barrier or a sendrecv, then core 1 until it reaches its matching
one; there the two meet (a sendrecv copies each core's ``src`` into the
peer's ``dst``) and core 0 continues. The recorded order is therefore
deterministic and respects every barrier: all that either core does before
a barrier comes before anything either does after it. Without barriers the
order is today's (core 0's program, then core 1's).

Barriers and sendrecvs pair positionally, as on the hardware (the Nth
synchronisation of one core meets the Nth of the other). A barrier or
sendrecv that the other core never reaches (it finished, or it reached the
other kind) is an ``NKIError`` at the unmatched call's kernel line.
"""

from __future__ import annotations

import os
import threading

from . import trace_state
from .errors import NKIError
from .trace_state import HBM, SBUF, current, error, user_location
from .view import View

# Generous stacks for kernel threads (NKI-lib kernels recurse deeply).
_THREAD_STACK = 256 << 20
# A traced kernel never waits on anything but the other core: the bound is
# only there so that no thread outlives a launch.
_JOIN_SECONDS = 3600.0


def run_programs(scheduler, programs, what: str) -> None:
    """Runs each (thread name, target, args) of ``programs`` on a thread of its
    own with a deep stack (the turnstile of ``scheduler`` lets one run at a
    time), every wait bounded: threads still alive after the bound are told
    to abort (``scheduler.aborted`` under ``scheduler.cond``) and are an
    NKIError naming ``what``. Then raises the first error a program raised.
    The LNC=2 cores here and collectives.py's ranks run through it."""
    old_size = threading.stack_size()
    try:
        threading.stack_size(_THREAD_STACK)
    except (ValueError, RuntimeError):  # pragma: no cover (platform limits)
        pass
    try:
        threads = [
            threading.Thread(target=target, args=args, name=name, daemon=True)
            for name, target, args in programs
        ]
    finally:
        threading.stack_size(old_size)
    for th in threads:
        th.start()
    for th in threads:
        th.join(_JOIN_SECONDS)
    if any(th.is_alive() for th in threads):
        with scheduler.cond:
            scheduler.aborted = True
            scheduler.cond.notify_all()
        for th in threads:
            th.join(10.0)
        raise NKIError(f"{what} did not finish tracing")
    for e in scheduler.errors:
        if e is not None:
            raise e


class _Aborted(BaseException):
    """Unwinds a core's thread when the other core failed."""


class _Sync:
    """A core waiting at a barrier or sendrecv."""

    __slots__ = ("kind", "loc", "src", "dst", "done")

    def __init__(self, kind, loc, src=None, dst=None):
        self.kind = kind  # "core_barrier" or "sendrecv"
        self.loc = loc
        self.src = src
        self.dst = dst
        self.done = False


def _where(loc) -> str:
    return f"{os.path.basename(loc[0])}:{loc[1]}"


class Turnstile:
    """The two cores of an LNC=2 launch, traced one at a time."""

    def __init__(self, trace, ncores: int = 2):
        self.trace = trace
        self.ncores = ncores
        self.cond = threading.Condition()
        self.turn = 0
        self.waiting: list[_Sync | None] = [None] * ncores
        self.finished = [False] * ncores
        self.aborted = False
        self.errors: list = [None] * ncores
        self.results: list = [None] * ncores

    # Running the programs ------------------------------------------------
    def run(self, fn, args, kwargs) -> list:
        """Traces ``fn`` once per core (program ids (0,), (1,)) and returns
        each core's return value."""
        t = self.trace
        t.cores = self
        try:
            run_programs(
                self,
                [
                    (f"nki-core-{c}", self._core_main, (c, fn, args, kwargs))
                    for c in range(self.ncores)
                ],
                "an LNC=2 kernel's cores",
            )
        finally:
            t.cores = None
        return self.results

    def _core_main(self, core, fn, args, kwargs):
        t = self.trace
        trace_state.state.trace = t
        t.program_id = (core,)
        t.shared_counter = 0
        try:
            with self.cond:
                while self.turn != core and not self.aborted:
                    self.cond.wait()
                if self.aborted:
                    return
            self.results[core] = fn(*args, **kwargs)
        except _Aborted:
            pass
        except BaseException as e:  # noqa: BLE001 (re-raised by run())
            self.errors[core] = e
            with self.cond:
                self.aborted = True
                self.cond.notify_all()
        finally:
            with self.cond:
                self.finished[core] = True
                peer = 1 - core
                if not self.finished[peer]:
                    self.turn = peer
                self.cond.notify_all()
            trace_state.state.trace = None

    # Synchronisation -------------------------------------------------------
    def sync(self, kind, loc, src=None, dst=None) -> None:
        """Core ``t.core`` reaches a barrier / sendrecv: wait for the other
        core to reach its matching one, then continue."""
        t = self.trace
        core = t.core
        peer = 1 - core
        me = _Sync(kind, loc, src, dst)
        with self.cond:
            if self.aborted:
                raise _Aborted
            other = self.waiting[peer]
            if other is not None:
                # The second to arrive: the meeting happens here.
                self.waiting[peer] = None
                self._meet(core, me, peer, other)
                other.done = True
                self.turn = 0
                self.cond.notify_all()
                if core == 0:
                    return
                me.done = True  # core 1 resumes once core 0 hands over
            else:
                if self.finished[peer]:
                    raise self._unmatched(kind, loc, core, peer)
                self.waiting[core] = me
                self.turn = peer
                self.cond.notify_all()
            while not self.aborted:
                if me.done and self.turn == core:
                    return
                if not me.done and self.finished[peer]:
                    self.waiting[core] = None
                    raise self._unmatched(kind, loc, core, peer)
                self.cond.wait()
            raise _Aborted

    def _unmatched(self, kind, loc, core, peer) -> NKIError:
        return error(
            f"nisa.{kind} on core {core} has no match: core {peer} finished without "
            f"reaching a matching {kind} (deadlock; the two cores of an LNC=2 kernel "
            "must make the same barriers and sendrecvs, in the same order)",
            "deadlock",
            loc,
        )

    def _meet(self, core, me: _Sync, peer, other: _Sync) -> None:
        if me.kind != other.kind:
            raise error(
                f"nisa.{me.kind} on core {core} meets nisa.{other.kind} on core {peer} "
                f"(at {_where(other.loc)}): the two cores of an LNC=2 kernel must make "
                "the same barriers and sendrecvs, in the same order (deadlock)",
                "deadlock",
                me.loc,
            )
        # The meeting ends an epoch (Trace.interleave_cores); a sendrecv's
        # transfers are an epoch of their own, between the two.
        self.trace.epoch += 1
        if me.kind == "sendrecv":
            by_core = {core: me, peer: other}
            _exchange(self.trace, by_core[0], by_core[1])
            self.trace.epoch += 1


def _exchange(t, s0: _Sync, s1: _Sync) -> None:
    """Core 0's src into core 1's dst and core 1's src into core 0's dst,
    each at its sender's line. A source the exchange also writes is read
    first (staged), as both transfers happen at once."""
    from .legacy_isa import _dma, oob_mode

    for a, b, ca, cb in ((s0, s1, 0, 1), (s1, s0, 1, 0)):
        if tuple(a.src.shape) != tuple(b.dst.shape) or a.src.dtype != b.dst.dtype:
            raise error(
                f"nisa.sendrecv: core {ca} sends {list(a.src.shape)} {a.src.dtype}, core "
                f"{cb} receives into {list(b.dst.shape)} {b.dst.dtype} (at "
                f"{_where(b.loc)}); the shapes and dtypes must match",
                "shape",
                a.loc,
            )
    srcs = [s0.src, s1.src]
    written = {s0.dst.buf.index, s1.dst.buf.index}
    for c, s in enumerate((s0, s1)):
        if s.src.buf.index in written:
            tmp = t.new_buffer(
                s.src.buf.space, s.src.dtype, s.src.shape, loc=s.loc, core=s.src.buf.core
            )
            staged = View.contiguous(tmp)
            _dma(staged, s.src, None, None, oob_mode.error, s.loc)
            srcs[c] = staged
    _dma(s1.dst, srcs[0], None, None, oob_mode.error, s0.loc)
    _dma(s0.dst, srcs[1], None, None, oob_mode.error, s1.loc)


# The instructions ---------------------------------------------------------------
def _check_ranks(cores, what, loc) -> tuple:
    try:
        ranks = tuple(int(c) for c in cores)
    except TypeError:
        raise error(f"{what} takes a tuple of core ranks, got {cores!r}", "operand", loc) from None
    if not ranks or any(r not in (0, 1) for r in ranks) or len(set(ranks)) != len(ranks):
        raise error(
            f"{what}: cores must be distinct ranks 0 and 1 (cores=(0, 1)), got {cores!r}",
            "operand",
            loc,
        )
    return ranks


def core_barrier(data, cores, engine=None, name=None, **kwargs) -> None:
    """``nisa.core_barrier(data, cores)``: the cores in ``cores`` wait for
    each other; what each did before it (its writes to the shared HBM tensor
    ``data``) is done before either continues. At an LNC=2 launch
    (``kernel[2]``) with ``cores=(0, 1)`` the two cores meet; a barrier of
    one core alone, or in a launch of one program (LNC=1: the other
    physical core runs no part of this kernel here), orders nothing."""
    loc = user_location()
    t = current()
    ranks = _check_ranks(cores, "nisa.core_barrier", loc)
    if not isinstance(data, View) or data.buf.space != HBM:
        raise error(
            "nisa.core_barrier synchronises on a tensor in shared HBM (the data both "
            f"cores write), got {type(data).__name__ if not isinstance(data, View) else 'a tile'}",
            "operand",
            loc,
        )
    if t.cores is None:
        if t.grid and len(ranks) > 1 and _programs(t) > 1:
            raise error(
                "nisa.core_barrier between cores needs an LNC=2 launch (kernel[2]); this "
                f"launch's grid is {list(t.grid)}",
                "operand",
                loc,
            )
        return
    if t.core not in ranks:
        raise error(
            f"nisa.core_barrier(cores={ranks}) called on core {t.core}, which is not among them",
            "operand",
            loc,
        )
    if len(ranks) == 1:
        return
    t.cores.sync("core_barrier", loc)


def sendrecv(
    src, dst, send_to_rank, recv_from_rank, pipe_id=0, dma_engine=None, name=None, **kwargs
) -> None:
    """``nisa.sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id)``:
    this core's ``src`` tile goes into the peer core's ``dst`` while the
    peer's ``src`` comes into this core's ``dst`` (SBUF tiles of one shape
    and dtype). The two cores' calls pair in program order."""
    loc = user_location()
    t = current()
    for label, v in (("src", src), ("dst", dst)):
        if not isinstance(v, View):
            raise error(
                f"nisa.sendrecv: {label} must be a tile, got {type(v).__name__}", "operand", loc
            )
        if v.buf.space != SBUF:
            raise error(f"nisa.sendrecv: {label} must be in SBUF", "memory", loc)
    if t.cores is None:
        raise error(
            "nisa.sendrecv exchanges tiles between the two cores of an LNC=2 launch "
            f"(kernel[2]); this launch's grid is {list(t.grid) if t.grid else 'none'}",
            "operand",
            loc,
        )
    core = t.core
    for label, r in (("send_to_rank", send_to_rank), ("recv_from_rank", recv_from_rank)):
        try:
            r = int(r)
        except TypeError:
            raise error(
                f"nisa.sendrecv: {label} must be 0 or 1, got {r!r}", "operand", loc
            ) from None
        if r not in (0, 1):
            raise error(f"nisa.sendrecv: {label} must be 0 or 1, got {r}", "operand", loc)
        if r == core:
            raise error(
                f"nisa.sendrecv on core {core}: {label}={r} is this core; the exchange is "
                "with the other core of the pair",
                "operand",
                loc,
            )
    t.cores.sync("sendrecv", loc, src, dst)


def _programs(t) -> int:
    n = 1
    for g in t.grid:
        n *= g
    return n


def is_lnc_launch(grid: tuple) -> bool:
    """Whether a launch grid is an LNC=2 launch: one dimension of two
    programs (``kernel[2]``, ``kernel[nl.nc(2)]``), one per physical core."""
    return tuple(grid) == (2,)
