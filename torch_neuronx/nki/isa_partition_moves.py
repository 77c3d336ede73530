"""Data movement between partitions and within partition groups:
``nisa.nc_stream_shuffle`` (Vector engine) and ``nisa.local_gather`` (GpSimd).

NKI's page (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/
generated/nki.isa.nc_stream_shuffle.html, and the 0.7/0.8 pages of Neuron
2.26-2.34): ``shuffle_mask`` is a list of 32 entries; within each quadrant of
32 partitions, output partition ``i`` copies input partition
``shuffle_mask[i]`` of the same quadrant (quadrants counted from each
operand's start partition), and 255 leaves output partition ``i`` unmodified.
Several quadrants take the same mask, each independently. ``src`` and
``dst`` are SBUF or PSUM tiles of one dtype with the same number of elements
per partition (at most four free dims); ``dst`` may be ``src`` (in place).
Start partitions follow the number of active partitions,
``ceil(max(src partitions, dst partitions) / 32) * 32``: 32 → a start of
0/32/64/96, 64 → 0/64, 96 or 128 → 0.

The simulator has no shuffle record: the mask is split into maximal runs of
entries that are affine in ``i`` (a broadcast mask ``[k] * 32`` is one run of
step 0, a shift one run of step 1), and each run is one Vector-engine copy
whose access covers every quadrant (a partition step of 0 for a broadcast).
An in-place shuffle whose writes would clobber partitions a later run reads
first copies the source to a scratch tile.

Cost. NKI's nc_stream_shuffle page gives no cycle figure (none in the
versions of it available here). A broadcast or shift mask is one copy here,
charged as one Vector pass over the elements per partition (max(64, N)
cycles, the cost model's figure for a Vector copy): the one hardware pass. A
mask of r runs is r copies (r passes), each charged over ``min(quadrants,
run length)`` times N elements; an in-place shuffle that needs the scratch
copy adds one pass. Both over-estimate the single hardware instruction.

``local_gather`` (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/
api/generated/nki.isa.local_gather.html and the NumPy reference of its
documented example, ``test_nki_isa_local_gather.py``): each GpSimd core owns
16 partitions; it flattens its 16 partitions of ``index`` partition-first
(``indices_1d[j] = index[16c + j % 16, j // 16]``), keeps the first
``num_valid_indices``, and every one of its partitions p gathers
``dst[p, j, e] = src_buffer[p, indices_1d[j] + e]`` (free dims flattened, e <
``num_elem_per_idx``; the indices are element offsets). That is the
simulator's tensor-indirection gather record (groups of 16 partitions, the
same offset mapping), one record per element of ``num_elem_per_idx``. An
index outside the source row is an error when the kernel runs (the check the
gather record makes). Cost: NKI's local_gather page gives no figure (in the
versions available here); each record is charged as a GpSimd instruction
over the gathered elements (150 + N cycles), ``num_elem_per_idx`` of them.
"""

from __future__ import annotations

import math

from . import language as nl
from .dynamic_index import IndirectView
from .trace_state import HBM, MAX_DIMS, SBUF, current, error, user_location
from .view import View

QUADRANT = 32
SKIP = 255  # a mask entry that leaves its output partition unmodified
# Start partitions allowed for each number of active partitions.
_STARTS = {32: (0, 32, 64, 96), 64: (0, 64), 96: (0,), 128: (0,)}


def nc_stream_shuffle(dst=None, src=None, shuffle_mask=None, name=None, **kwargs) -> None:
    """``nisa.nc_stream_shuffle(dst, src, shuffle_mask)`` (NKI 0.7/0.8): moves
    partitions of ``src`` into ``dst`` within quadrants of 32 partitions."""
    _shuffle(dst, src, shuffle_mask, kwargs.get("mask"), user_location())


def legacy_nc_stream_shuffle(src=None, dst=None, shuffle_mask=None, *, dtype=None, mask=None, **kw):
    """``neuronxcc.nki.isa.nc_stream_shuffle(src, dst, shuffle_mask)``: the
    original argument order; it too writes ``dst`` in place."""
    loc = user_location()
    if dtype is not None and isinstance(dst, View) and nl._dt.as_dtype(dtype) != dst.dtype:
        raise error(
            f"nc_stream_shuffle: dtype {nl._dt.as_dtype(dtype).name} differs from dst's "
            f"{dst.dtype.name} (the shuffle copies, it does not convert)",
            "dtype",
            loc,
        )
    _shuffle(dst, src, shuffle_mask, mask, loc)


# Checks ------------------------------------------------------------------------
def _operand(x, what: str, loc) -> View:
    if isinstance(x, IndirectView):
        raise x.unsupported(f"nc_stream_shuffle {what}", loc)
    if not isinstance(x, View):
        raise error(
            f"nc_stream_shuffle: {what} must be an SBUF or PSUM tile, got {type(x).__name__}",
            "operand",
            loc,
        )
    if x.buf.space == HBM:
        raise error(
            f"nc_stream_shuffle: {what} is in HBM; the shuffle moves SBUF/PSUM partitions "
            "(load it first)",
            "buffer",
            loc,
        )
    x.static_only(f"nc_stream_shuffle {what}", loc)
    if x.ndim < 2 or x.ndim > 5:
        raise error(
            f"nc_stream_shuffle: {what} {list(x.shape)} must have a partition dim and one to "
            "four free dims",
            "shape",
            loc,
        )
    x.verify(loc=loc)
    return x


def _row(v: View) -> int:
    """Elements per partition of v's buffer."""
    return max(math.prod(v.buf.shape[1:]), 1)


def _start_partition(v: View, what: str, loc) -> int:
    row = _row(v)
    if v.shape[0] > 1 and v.strides[0] != row:
        raise error(
            f"nc_stream_shuffle: {what} must access consecutive partitions (its partition step "
            f"is {v.strides[0]} elements, a partition holds {row})",
            "partition-step",
            loc,
        )
    return v.offset // row


def _mask_entries(shuffle_mask, loc) -> list[int]:
    if shuffle_mask is None or isinstance(shuffle_mask, (str, bytes)):
        raise error("nc_stream_shuffle needs a shuffle_mask of 32 entries", "operand", loc)
    try:
        entries = list(shuffle_mask)
    except TypeError:
        raise error(
            f"nc_stream_shuffle: shuffle_mask must be a list of 32 entries, got "
            f"{type(shuffle_mask).__name__}",
            "operand",
            loc,
        ) from None
    if len(entries) != QUADRANT:
        raise error(
            f"nc_stream_shuffle: shuffle_mask has {len(entries)} entries; it takes one per "
            f"partition of a quadrant ({QUADRANT})",
            "shape",
            loc,
        )
    out = []
    for i, m in enumerate(entries):
        try:
            if isinstance(m, (bool, float)):
                raise TypeError
            m = int(m.__index__())
        except (TypeError, AttributeError):
            raise error(
                f"nc_stream_shuffle: shuffle_mask[{i}] = {m!r}: entries are integers (a "
                "source partition 0-31, or 255); an affine expression of the kernel's indices "
                "as an entry is not supported yet",
                "operand",
                loc,
            ) from None
        if m != SKIP and not 0 <= m < QUADRANT:
            raise error(
                f"nc_stream_shuffle: shuffle_mask[{i}] = {m} is neither a partition of the "
                f"quadrant (0-{QUADRANT - 1}) nor {SKIP} (leave unmodified)",
                "operand",
                loc,
            )
        out.append(m)
    return out


def _free_dims(v: View):
    """v's free dims with size-1 dims dropped and contiguous neighbours merged."""
    dims = [(n, s) for n, s in zip(v.shape[1:], v.strides[1:], strict=True) if n != 1]
    out: list[list[int]] = []
    for n, s in dims:
        if out and out[-1][1] == n * s:
            out[-1] = [out[-1][0] * n, s]
        else:
            out.append([n, s])
    return [tuple(d) for d in out] or [(1, 1)]


def _split(dims, sizes):
    """A single run of elements (one (n, stride) dim) seen as ``sizes``."""
    ((_, s),) = dims
    out, acc = [], s
    for n in reversed(sizes):
        out.append((n, acc))
        acc *= n
    return list(reversed(out))


def _common_free(d: View, s: View, loc):
    """Free dims of dst and src with the same sizes (each [(size, stride)])."""
    fd, fs = _free_dims(d), _free_dims(s)
    if [n for n, _ in fd] == [n for n, _ in fs]:
        return fd, fs
    if len(fs) == 1:
        return fd, _split(fs, [n for n, _ in fd])
    if len(fd) == 1:
        return _split(fd, [n for n, _ in fs]), fs
    raise error(
        f"nc_stream_shuffle: dst {list(d.shape)} and src {list(s.shape)} lay out their "
        "elements per partition differently and neither is contiguous: not supported yet",
        "shape",
        loc,
    )


# The shuffle -------------------------------------------------------------------
def _runs(mask: list[int], n: int):
    """Maximal runs (first, length, source, step) of the first n mask entries
    whose source partition is affine in the output partition."""
    runs, i = [], 0
    while i < n:
        if mask[i] == SKIP:
            i += 1
            continue
        j, step = i + 1, None
        while j < n and mask[j] != SKIP:
            d = mask[j] - mask[j - 1]
            if step is None:
                step = d
            elif d != step:
                break
            j += 1
        runs.append((i, j - i, mask[i], step or 0))
        i = j
    return runs


def _shuffle(dst, src, shuffle_mask, mask, loc) -> None:
    current()
    dst = _operand(dst, "dst", loc)
    src = _operand(src, "src", loc)
    if mask is not None:
        raise error(
            "nc_stream_shuffle with a mask is not supported yet (leave dst partitions "
            "unmodified with shuffle_mask entries of 255)",
            "operand",
            loc,
        )
    entries = _mask_entries(shuffle_mask, loc)
    if dst.dtype != src.dtype:
        raise error(
            f"nc_stream_shuffle: dst is {dst.dtype.name} and src {src.dtype.name}; they must "
            "have the same data type",
            "dtype",
            loc,
        )
    fd_n, fs_n = math.prod(dst.shape[1:]), math.prod(src.shape[1:])
    if fd_n != fs_n:
        raise error(
            f"nc_stream_shuffle: dst {list(dst.shape)} has {fd_n} elements per partition and "
            f"src {list(src.shape)} {fs_n}; they must have the same number",
            "shape",
            loc,
        )
    pd, ps = dst.shape[0], src.shape[0]
    d0 = _start_partition(dst, "dst", loc)
    s0 = _start_partition(src, "src", loc)
    active = -(-max(pd, ps) // QUADRANT) * QUADRANT
    for what, start in (("src", s0), ("dst", d0)):
        if start not in _STARTS.get(active, ()):
            allowed = "/".join(str(a) for a in _STARTS.get(active, ()))
            raise error(
                f"nc_stream_shuffle: {what} starts at partition {start}; with {active} active "
                f"partitions (max of src {ps} and dst {pd}, rounded up to quadrants) it must "
                f"start at {allowed}",
                "partition-start",
                loc,
            )
    fd, fs = _common_free(dst, src, loc)
    full, tail = divmod(pd, QUADRANT)
    # (first quadrant, quadrants, runs) of the whole quadrants, then of a
    # partial last one (only its first `tail` mask entries have outputs).
    groups = []
    if full:
        groups.append((0, full, _runs(entries, QUADRANT)))
    if tail:
        groups.append((full, 1, _runs(entries, tail)))
    for q0, nq, runs in groups:
        for i0, n, m0, step in runs:
            last = (q0 + nq - 1) * QUADRANT + max(m0, m0 + step * (n - 1))
            first = q0 * QUADRANT + min(m0, m0 + step * (n - 1))
            if last >= ps or first < 0:
                bad = next(
                    k for k in range(i0, i0 + n) if (q0 + nq - 1) * QUADRANT + entries[k] >= ps
                )
                raise error(
                    f"nc_stream_shuffle: shuffle_mask[{bad}] = {entries[bad]} reads partition "
                    f"{(q0 + nq - 1) * QUADRANT + entries[bad]} of src (quadrant "
                    f"{q0 + nq - 1}), which has {ps} partitions",
                    "out-of-bounds",
                    loc,
                )
    if not any(runs for _, _, runs in groups):
        return  # every entry is 255: nothing moves
    scratch = _scratch_if_clobbered(dst, src, d0, s0, groups, loc)
    if scratch is not src:
        src = scratch
        fd, fs = _common_free(dst, src, loc)
    t = current()
    dps = dst.strides[0] if pd > 1 else _row(dst)
    sps = src.strides[0] if ps > 1 else _row(src)
    for q0, nq, runs in groups:
        for i0, n, m0, step in runs:
            part = [(n, dps, step * sps), (nq, QUADRANT * dps, QUADRANT * sps)]
            part = [p for p in part if p[0] > 1] or [(1, dps, sps)]
            # The larger partition dim leads: the cost model counts the rest
            # as elements per partition.
            part.sort(key=lambda p: -p[0])
            shape = tuple(p[0] for p in part) + tuple(n_ for n_, _ in fd)
            if len(shape) > MAX_DIMS:
                raise error(
                    f"nc_stream_shuffle: this access needs {len(shape)} dims (at most "
                    f"{MAX_DIMS}); use fewer free dims",
                    "shape",
                    loc,
                )
            dv = View(
                dst.buf,
                dst.offset + (q0 * QUADRANT + i0) * dps,
                shape,
                tuple(p[1] for p in part) + tuple(st for _, st in fd),
            )
            sv = View(
                src.buf,
                src.offset + (q0 * QUADRANT + m0) * sps,
                shape,
                tuple(p[2] for p in part) + tuple(st for _, st in fs),
            )
            t.emit("copy", "vector", dv, [sv], loc=loc)


def _free_range(v: View) -> tuple[int, int]:
    lo = hi = v.offset % _row(v)
    for n, s in zip(v.shape[1:], v.strides[1:], strict=True):
        if s < 0:
            lo += s * (n - 1)
        else:
            hi += s * (n - 1)
    return lo, hi


def _scratch_if_clobbered(dst: View, src: View, d0, s0, groups, loc) -> View:
    """The source to read: ``src``, or a scratch copy of it when an in-place
    shuffle would overwrite (with other data) a partition a run reads."""
    if dst.buf is not src.buf:
        return src
    (dlo, dhi), (slo, shi) = _free_range(dst), _free_range(src)
    if dhi < slo or shi < dlo:
        return src  # other elements of the same partitions
    same_free = (dst.offset % _row(dst), dst.shape[1:], dst.strides[1:]) == (
        src.offset % _row(src),
        src.shape[1:],
        src.strides[1:],
    )
    written, read = set(), set()
    for q0, nq, runs in groups:
        for i0, n, m0, step in runs:
            for q in range(q0, q0 + nq):
                for k in range(n):
                    to = d0 + q * QUADRANT + i0 + k
                    frm = s0 + q * QUADRANT + m0 + step * k
                    if to == frm and same_free:
                        continue  # rewrites what is there
                    written.add(to)
                    read.add(frm)
    if not written & read:
        return src
    tmp = nl._new_tile(src.shape, src.dtype, loc)
    current().emit("copy", "vector", tmp, [src], loc=loc)
    return tmp


# local_gather -------------------------------------------------------------------
GPSIMD_GROUP = 16  # partitions of one GpSimd core


def local_gather(
    dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, name=None, **kwargs
) -> None:
    """``nisa.local_gather(dst, src_buffer, index, ...)`` (NKI 0.7/0.8)."""
    _local_gather(dst, src_buffer, index, num_elem_per_idx, num_valid_indices, user_location())


def legacy_local_gather(
    src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, *, mask=None, **kwargs
) -> View:
    """``neuronxcc.nki.isa.local_gather``: returns a new [P, indices,
    num_elem_per_idx] tile."""
    loc = user_location()
    if mask is not None:
        raise error("local_gather with a mask is not supported yet", "operand", loc)
    src = _gather_operand(src_buffer, "src_buffer", loc)
    idx = _gather_operand(index, "index", loc)
    e = _positive(num_elem_per_idx, "num_elem_per_idx", loc)
    n = _valid_count(idx, num_valid_indices, loc)
    out = nl._new_tile((src.shape[0], n, e), src.dtype, loc)
    _local_gather(out, src, idx, e, n, loc)
    return out


def _gather_operand(x, what, loc) -> View:
    if isinstance(x, IndirectView):
        raise x.unsupported(f"local_gather {what}", loc)
    if not isinstance(x, View) or x.buf.space != SBUF:
        raise error(
            f"local_gather: {what} must be an SBUF tile (the GpSimd engine cannot reach "
            f"PSUM or HBM), got {x!r}",
            "buffer",
            loc,
        )
    x.static_only(f"local_gather {what}", loc)
    x.verify(loc=loc)
    return x


def _positive(n, what, loc) -> int:
    try:
        n = int(n)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise error(f"local_gather: {what} must be a positive integer", "operand", loc)
    return n


def _valid_count(idx: View, num_valid, loc) -> int:
    per_core = GPSIMD_GROUP * math.prod(idx.shape[1:])
    if num_valid is None:
        return per_core
    n = _positive(num_valid, "num_valid_indices", loc)
    if n > per_core:
        raise error(
            f"local_gather: num_valid_indices {n} exceeds the {per_core} indices each GpSimd "
            f"core reads (16 partitions of index {list(idx.shape)})",
            "shape",
            loc,
        )
    return n


def _flat2d(v: View, what, loc) -> View:
    dims = _free_dims(v)
    if len(dims) != 1:
        raise error(
            f"local_gather: {what} {list(v.shape)} must have contiguous free dims "
            "(they are flattened)",
            "shape",
            loc,
        )
    ((n, s),) = dims
    return View(v.buf, v.offset, (v.shape[0], n), (v.strides[0], s))


def _local_gather(dst, src, idx, num_elem, num_valid, loc) -> None:
    current()
    src = _gather_operand(src, "src_buffer", loc)
    idx = _gather_operand(idx, "index", loc)
    dst = _gather_operand(dst, "dst", loc)
    e = _positive(num_elem, "num_elem_per_idx", loc)
    n = _valid_count(idx, num_valid, loc)
    p = src.shape[0]
    if idx.shape[0] != p or dst.shape[0] != p:
        raise error(
            f"local_gather: src_buffer {list(src.shape)}, index {list(idx.shape)} and dst "
            f"{list(dst.shape)} must have the same partitions",
            "shape",
            loc,
        )
    if p % GPSIMD_GROUP:
        raise error(
            f"local_gather: {p} partitions are not whole GpSimd cores of {GPSIMD_GROUP}",
            "shape",
            loc,
        )
    if idx.dtype.is_float:
        raise error(
            f"local_gather: index is {idx.dtype.name}; indices are integers (uint16)",
            "dtype",
            loc,
        )
    if dst.dtype != src.dtype:
        raise error(
            f"local_gather: dst is {dst.dtype.name} and src_buffer {src.dtype.name}; they "
            "must have the same data type",
            "dtype",
            loc,
        )
    if math.prod(dst.shape[1:]) != n * e:
        raise error(
            f"local_gather: dst {list(dst.shape)} must hold num_valid_indices x "
            f"num_elem_per_idx = {n} x {e} elements per partition",
            "shape",
            loc,
        )
    data, out, ix = _flat2d(src, "src_buffer", loc), _flat2d(dst, "dst", loc), idx
    if ix.ndim != 2:
        ix = _flat2d(ix, "index", loc)
    t = current()
    for k in range(e):
        # Element k of every index: the data row shifted by k (an index
        # with k past the row's end is out of range).
        d = View(data.buf, data.offset + k * data.strides[1], (p, data.shape[1] - k), data.strides)
        o = View(
            out.buf, out.offset + k * out.strides[1], (p, n), (out.strides[0], e * out.strides[1])
        )
        t.emit("gather", "gpsimd", o, [d, ix], loc=loc)


__all__ = ["nc_stream_shuffle", "legacy_nc_stream_shuffle", "local_gather", "legacy_local_gather"]
