"""Races on shared HBM between the two cores of a logical core (LNC=2).

The two physical cores of an LNC=2 launch run at the same time between two
meetings (``nisa.core_barrier`` / ``nisa.sendrecv``; each meeting ends an
epoch, ``Trace.epoch``). Nothing orders what one core does to HBM against
what the other does in the same epoch, so a write by one core and a read or
write by the other of the same HBM elements in one epoch is a race: on the
hardware its outcome depends on timing. Such a kernel is an ``NKIError``
(``limit="hbm-race"``) naming both kernel lines; the same accesses with a
barrier between them are ordered and fine.

Checked on the traced records, before the cores' streams are interleaved:
every record's HBM destination is a write and its HBM sources are reads (only
DMAs touch HBM). Two writes that store the same bytes are no race (either
order leaves the same values): two writes of one constant (each core copying
a tile it filled with the same memset, as a library zero-fills an output
from both cores), and the same write made by both cores from the same
computation (a kernel that does not shard some work runs it on both cores,
as NKI-lib's kernels do at LNC=2 when a dimension is 1). The latter is
recognised by value numbering: a tile's contents are numbered by the
instructions that wrote them, with their operands' numbers, immediates and
access patterns (an HBM read by its elements and epoch), so a core that
computed anything differently (another offset, a program-id constant)
writes a different number. Elements are compared exactly (strided accesses that
interleave without meeting do not race). An access at a run-time index (a
dynamic DMA) is not checked: which rows it touches is known only when it runs.
Cores of different ranks (a multi-rank launch) have HBM tensors of their own
and are not compared.
"""

from __future__ import annotations

import os
import warnings
from collections import defaultdict

import numpy as np

from . import layout
from .trace_state import HBM, OP, error

_HEADER = len(layout.INSTRUCTION_FIELDS)
_ACCESS = layout.ACCESS_WORDS
_OP_WORD = layout.INSTRUCTION_FIELDS.index("op")
_LOC_WORD = layout.INSTRUCTION_FIELDS.index("loc")
_DIMS = (_ACCESS - 3) // 2
# Accesses larger than this many elements are compared by their extent only
# (their first and last element): never a missed race, rarely a false one.
_EXACT_LIMIT = 1 << 22


class _Access:
    __slots__ = (
        "core",
        "instr",
        "write",
        "const",
        "value",
        "offset",
        "sizes",
        "strides",
        "lo",
        "hi",
    )

    def __init__(self, core, instr, write, words, const=None, value=None):
        ndim = words[1]
        self.core = core
        self.instr = instr
        self.write = write
        # A write of one constant (a DMA of a memset tile): (value, dtype).
        self.const = const
        # A write's value number: equal numbers store equal bytes.
        self.value = value
        self.offset = words[2]
        self.sizes = tuple(words[3 : 3 + ndim])
        self.strides = tuple(words[3 + _DIMS : 3 + _DIMS + ndim])
        lo = hi = self.offset
        for s, t in zip(self.sizes, self.strides, strict=True):
            span = t * (s - 1)
            if span < 0:
                lo += span
            else:
                hi += span
        self.lo, self.hi = lo, hi

    def count(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n

    def elements(self) -> np.ndarray:
        off = np.array([self.offset], dtype=np.int64)
        for s, t in zip(self.sizes, self.strides, strict=True):
            off = (off[:, None] + np.arange(s, dtype=np.int64) * t).ravel()
        return np.unique(off)


def _common_element(a: _Access, b: _Access) -> int | None:
    """An element both accesses touch, or None."""
    if a.hi < b.lo or b.hi < a.lo:
        return None
    if a.count() > _EXACT_LIMIT or b.count() > _EXACT_LIMIT:
        return max(a.lo, b.lo)
    both = np.intersect1d(a.elements(), b.elements(), assume_unique=True)
    return int(both[0]) if both.size else None


# TORCH_NEURONX_NKI_HBM_RACES: "error" (default), "warn" or "off". The check
# cannot prove that two cores store equal bytes when they compute them by
# different paths (one core's half computed, the other's received): such a
# kernel is correct on the hardware only if the bytes agree, which a user who
# knows it can assert by turning the error into a warning.
_MODES = ("error", "warn", "off")


def _mode() -> str:
    mode = os.environ.get("TORCH_NEURONX_NKI_HBM_RACES", "error").strip().lower() or "error"
    if mode not in _MODES:
        raise ValueError(
            f"TORCH_NEURONX_NKI_HBM_RACES={mode!r}: expected one of {', '.join(_MODES)}"
        )
    return mode


def check(t) -> None:
    """Raises an NKIError for the first race on shared HBM between the cores
    of one logical core in one epoch (a warning, or nothing, as
    TORCH_NEURONX_NKI_HBM_RACES says). Call once, after tracing and before
    ``Trace.interleave_cores`` (the records are still in traced order)."""
    if t.lnc < 2 or not t.ninstr:
        return
    mode = _mode()
    if mode == "off":
        return
    words, n = t.words, layout.INSTRUCTION_WORDS
    dynamic, memset, copy = OP["dma_dynamic"], OP["memset"], OP["copy"]
    # On-chip tiles whose every element holds one constant (filled whole by a
    # memset and only read since): index -> value.
    constant: dict = {}
    # On-chip tiles' value numbers (module docstring): index -> number.
    contents: dict = {}
    imms, m = t.imms, layout.IMMEDIATES
    pure = (copy, memset, OP["iota"])  # write their destination from their sources alone
    # (rank, epoch, buffer) -> each core's accesses, in program order.
    groups: dict = defaultdict(lambda: defaultdict(list))
    for i, (epoch, core) in enumerate(t.instr_tags):
        base = i * n
        op = words[base + _OP_WORD]
        slots = [
            words[base + _HEADER + k * _ACCESS : base + _HEADER + (k + 1) * _ACCESS]
            for k in range(4)
        ]
        value = _number(t, words, base, imms[i * m : (i + 1) * m], slots, contents, epoch)
        d = slots[0][0]
        if d >= 0 and t.buffers[d].space != HBM:
            whole = op in pure and _fills(slots[0], t.buffers[d])
            contents[d] = value if whole else hash((contents.get(d), value))
        if op not in pure:
            # Sources it may also write (second destinations) change with it.
            for w in slots[1:]:
                if w[0] >= 0 and t.buffers[w[0]].space != HBM:
                    contents[w[0]] = hash((contents.get(w[0]), value))
        src = slots[1][0]
        const = None
        if op == copy and src >= 0 and src in constant and t.buffers[src].space != HBM:
            const = (constant[src], t.buffers[src].dtype.name)
        # What this record may write: its destination, and (other than a
        # DMA's or a memset's) any tile it names.
        for k, w in enumerate(slots):
            if w[0] >= 0 and (k == 0 or op not in (copy, memset)):
                constant.pop(w[0], None)
        if op == memset and slots[0][0] >= 0 and _fills(slots[0], t.buffers[slots[0][0]]):
            constant[slots[0][0]] = t.imms[i * layout.IMMEDIATES]
        if op == dynamic:
            continue
        # A copy of elements onto themselves (dma_copy(dst=t, src=t)) stores
        # the bytes already there: a read, not a write, for another core.
        onto_itself = op == copy and src >= 0 and src == d and list(slots[0]) == list(slots[1])
        for k, w in enumerate(slots):
            b = w[0]
            if b < 0 or w[1] == 0 or t.buffers[b].space != HBM:
                continue
            if k == 0 and onto_itself:
                continue
            acc = _Access(core, i, k == 0, w, const if k == 0 else None, value)
            groups[(core // t.lnc, epoch, b)][core].append(acc)
    first = None  # the race whose later instruction comes first
    for (_rank, _epoch, b), by_core in groups.items():
        if len(by_core) < 2:
            continue
        cores = sorted(by_core)
        for x in range(len(cores)):
            for y in range(x + 1, len(cores)):
                race = _first_race(by_core[cores[x]], by_core[cores[y]])
                if race is not None and (first is None or race[2] < first[2]):
                    first = (*race, b)
    if first is not None:
        err = _race_error(t, *first)
        if mode == "warn":
            warnings.warn(str(err), RuntimeWarning, stacklevel=2)
            return
        raise err


def _number(t, words, base, imm, slots, contents, epoch) -> int:
    """The value number of a record's result: its op fields (not its line),
    immediates, destination pattern and each operand's pattern and number
    (a tile's contents; an HBM read by its buffer, elements and epoch)."""
    header = tuple(words[base + k] for k in range(_HEADER) if k != _LOC_WORD)
    operands = []
    for w in slots[1:]:
        b = w[0]
        if b < 0:
            operands.append(tuple(w[1:]))
        elif t.buffers[b].space == HBM:
            operands.append(("hbm", b, tuple(w[1:]), epoch))
        else:
            operands.append((contents.get(b), tuple(w[1:])))
    return hash((header, tuple(imm), tuple(slots[0][1:]), tuple(operands)))


def _fills(w, buf) -> bool:
    """Whether access words `w` reach every element of `buf` (as many
    elements as it has, from its first to its last)."""
    a = _Access(0, 0, True, w)
    return a.lo == 0 and a.hi == buf.elements - 1 and a.count() == buf.elements


def _first_race(xs: list, ys: list):
    """The pair (a, b, key, element) of the two cores' accesses that meet,
    at least one a write, with the smallest later instruction index."""
    if not any(a.write for a in xs) and not any(b.write for b in ys):
        return None
    # Writes each side made itself (value number by pattern): a read of
    # elements the reader's own core stored earlier, racing the other core's
    # store of the same bytes there, reads those bytes either way (both cores
    # copying one input into a shared tensor, then reading it).
    own_x = {(a.value, a.offset, a.sizes, a.strides): a.instr for a in xs if a.write}
    own_y = {(b.value, b.offset, b.sizes, b.strides): b.instr for b in ys if b.write}
    ylo = np.array([b.lo for b in ys], dtype=np.int64)
    yhi = np.array([b.hi for b in ys], dtype=np.int64)
    ywrite = np.array([b.write for b in ys], dtype=bool)
    best = None
    for a in xs:
        cand = (ylo <= a.hi) & (yhi >= a.lo)
        if not a.write:
            cand &= ywrite
        for j in np.flatnonzero(cand):
            b = ys[int(j)]
            if (
                a.write
                and b.write
                and ((a.const is not None and a.const == b.const) or a.value == b.value)
            ):
                continue  # both store the same bytes: either order, same values
            if _reads_own_equal_store(a, b, own_x) or _reads_own_equal_store(b, a, own_y):
                continue
            key = max(a.instr, b.instr)
            if best is not None and key >= best[2]:
                continue
            e = _common_element(a, b)
            if e is not None:
                best = (a, b, key, e)
    return best


def _reads_own_equal_store(reader: _Access, writer: _Access, own: dict) -> bool:
    """Whether `reader` reads bytes its own core stored earlier with the
    value `writer` (the other core) stores at the same elements."""
    if reader.write or not writer.write:
        return False
    earlier = own.get((writer.value, writer.offset, writer.sizes, writer.strides))
    if earlier is None or earlier >= reader.instr:
        return False
    # Every element it reads is one of those stores' (else the rest races).
    if reader.lo < writer.lo or reader.hi > writer.hi:
        return False
    if reader.count() > _EXACT_LIMIT or writer.count() > _EXACT_LIMIT:
        return True
    return bool(np.isin(reader.elements(), writer.elements(), assume_unique=True).all())


def _race_error(t, a: _Access, b: _Access, _key, element, buf_index):
    buf = t.buffers[buf_index]
    shape = tuple(buf.shape) or (1,)
    if 0 <= element < buf.elements:
        index = str([int(i) for i in np.unravel_index(element, shape)])
    else:
        index = str(element)
    # Report at the later core's line, naming the other.
    later, earlier = (b, a) if b.core > a.core else (a, b)

    def where(acc):
        f, line, _ = t.locs[t.instr_locs[acc.instr]]
        return f"{os.path.basename(f)}:{line}"

    def verb(acc):
        return "writes" if acc.write else "reads"

    loc = t.locs[t.instr_locs[later.instr]]
    core_of = lambda acc: acc.core % t.lnc  # noqa: E731
    return error(
        f"race on shared HBM: core {core_of(later)} {verb(later)} "
        f"{buf.describe(t)} at element {index} "
        f"here while core {core_of(earlier)} {verb(earlier)} it at {where(earlier)}, with no "
        "nisa.core_barrier or nisa.sendrecv between them: the two cores of an LNC=2 kernel "
        "run at the same time, so the outcome depends on timing (order them with "
        "nisa.core_barrier(tensor, (0, 1)))",
        "hbm-race",
        loc,
    )
