"""The state every part of a traced kernel shares: the trace being recorded
on this thread (``current()``), the kernel source line at hand
(``user_location()``, ``error()``), the buffers of the tile program (``Buf``)
and the NeuronCore's memories, limits and codes.

It is apart from the ``Trace`` class (trace.py) because the views read it and
the trace builds views: view.py is built on this module, and trace.py on
view.py.
"""

from __future__ import annotations

import math
import os
import sys
import threading

from . import layout
from .errors import NKIError

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
# state.trace: the trace being recorded on this thread (kernel.py sets it).
state = threading.local()


def current():
    """The trace being recorded on this thread (a trace.Trace)."""
    t = getattr(state, "trace", None)
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
        "written",
        "producer",
        "consumed",
        "kind",
        "pending_zero",
        "core",
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
        kind="tile",
        core=0,
    ):
        self.index = index
        self.space = space
        self.dtype = dtype
        self.shape = tuple(shape)
        self.name = name
        self.loc = loc
        self.external = external
        self.initialized = initialized
        self.written = False  # an argument the kernel writes (in place)
        self.producer = -1  # the instruction that wrote it whole (fusion)
        self.consumed = False
        self.kind = kind  # "tile", "input", "output", "scratch"
        # nl.zeros of a PSUM tile: the zeroing is deferred (the location of
        # the call), so that a matmul group accumulating into it can write
        # the first product instead, as the NKI compiler does.
        self.pending_zero = None
        # The physical core whose SBUF/PSUM holds the tile (an LNC=2
        # launch's program id; 0 otherwise, and for HBM, which is shared).
        self.core = core

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    def describe(self, trace) -> str:
        where = ""
        if self.loc is not None and self.loc >= 0:
            f, line, _ = trace.locs[self.loc]
            where = f" allocated at {os.path.basename(f)}:{line}"
        label = self.name or {"input": "argument", "output": "result"}.get(self.kind, "tile")
        return f"{SPACE_NAMES[self.space]} {label} {list(self.shape)} {self.dtype.name}{where}"
