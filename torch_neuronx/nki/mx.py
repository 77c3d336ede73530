"""MX (microscaling) numbers: ``nisa.quantize_mx`` and ``nisa.nc_matmul_mx``
(NeuronCore-v4), on the packed types ``nl.float8_e4m3fn_x4``,
``nl.float8_e5m2_x4`` (four fp8 values in 32 bits) and
``nl.float4_e2m1fn_x4`` (four fp4 values in 16 bits).

Each is a simulator instruction (``runtime/nki/mx.h``; program.h,
Op::kQuantizeMx, kMxLoadStationary + kMatmulMx). The rules come from NKI's
pages (``nki.isa.quantize_mx``, ``nki.isa.nc_matmul_mx``) and its MX matmul
guide (``nki/deep-dives/mxfp-matmul``):

- A scale (uint8, E8M0: ``2**(s - 127)``) covers a group of 32 values: 8
  partitions x the 4 values of one packed element. The scale of the group of
  partitions ``8g..8g+7`` sits at partition ``(g // 4) * 32 + g % 4`` of the
  scale tile (its 32-partition quadrant's first rows), so a scale tile has
  ``P // 8`` partitions for ``P <= 32`` and ``P`` otherwise.
- ``quantize_mx(dst, src, dst_scale)`` (Vector engine): ``src`` [P, 4F]
  bf16/fp16, ``dst`` [P, F] fp8 x4 (element j packs the source's values
  4j..4j+3, free dims row-major), ``dst_scale`` F per partition. The scale
  exponent is the largest fp32 exponent of the group less the type's largest
  (8 for e4m3fn, 15 for e5m2), at least 0 (OCP MX v1.0's rule, as the guide's
  and NKI-lib's references compute it); values are divided by the scale,
  saturated to the type's largest finite value and rounded to nearest even.
- ``nc_matmul_mx(dst, stationary, moving, stationary_scale, moving_scale)``
  (Tensor engine): ``dst[m, n] = sum over k, q of stationary[k, m, q] *
  s_scale * moving[k, n, q] * m_scale``; ``stationary`` [K, M] and ``moving``
  [K, N] x4 (fp8 or fp4, mixed allowed), K <= 128, M <= 128, N <= 512,
  ``dst`` PSUM float32 or bfloat16. ``accumulate=None``: as nc_matmul, the
  first write of a PSUM region overwrites, later ones add.
"""

from __future__ import annotations

import math

from . import language as nl
from . import layout
from .trace_state import PSUM, SBUF, current, error, user_location
from .view import View

FP8_X4 = ("float8_e4m3fn_x4", "float8_e5m2_x4")
MX_X4 = (*FP8_X4, "float4_e2m1fn_x4")
QUANTIZE_SOURCES = ("bfloat16", "float16")
MATMUL_RESULTS = ("float32", "bfloat16")
PARTITION_QUADRANT = 32
GROUP_PARTITIONS = 8
MAX_CONTRACTION = 128
MAX_STATIONARY_FREE = 128
MAX_MOVING_FREE = 512
_ACCUMULATE = layout.FLAGS["accumulate"]


def is_mx(dtype) -> bool:
    return getattr(dtype, "name", None) in MX_X4


def scale_row(p: int) -> int:
    """The partition of a scale tile holding partition ``p``'s group scale."""
    return (p // PARTITION_QUADRANT) * PARTITION_QUADRANT + (p % PARTITION_QUADRANT) // 8


def _free(v: View) -> int:
    return math.prod(v.shape[1:]) if v.ndim > 1 else 1


def _tile(x, what: str, name: str, loc, space=SBUF) -> View:
    v = nl._static_operand(x, what, name, loc)
    if v.buf.space != space:
        where = "SBUF" if space == SBUF else "PSUM"
        raise error(f"{name}: {what} must be in {where}", "memory-space", loc)
    return v


def _dtype(v: View, allowed, what: str, name: str, loc) -> None:
    if v.dtype.name not in allowed:
        raise error(
            f"{name}: {what} is {v.dtype.name}; it must be {' or '.join(allowed)}", "dtype", loc
        )


def _scales(scale: View, partitions: int, free: int, exact: bool, what, name, loc) -> None:
    _dtype(scale, ("uint8",), what, name, loc)
    need = scale_row(partitions - 1) + 1 if partitions else 0
    have = _free(scale)
    if scale.shape[0] < need or (have != free if exact else have < free):
        rows = f"{partitions // 8}" if partitions <= PARTITION_QUADRANT else f"{partitions}"
        raise error(
            f"{name}: {what} {list(scale.shape)} does not hold the scales of {partitions} "
            f"partitions x {free} elements: it needs {rows} partitions (one scale per 8 "
            f"partitions, in the first rows of each 32-partition quadrant) and "
            f"{free}{'' if exact else ' or more'} elements per partition",
            "shape",
            loc,
        )


def quantize_mx(dst=None, src=None, dst_scale=None, name=None, **kwargs) -> None:
    """Quantizes ``src`` (bf16/fp16, [P, 4F]) into MXFP8 ``dst`` ([P, F] fp8
    x4) and its uint8 block scales ``dst_scale`` (Vector engine)."""
    loc = user_location()
    op = "quantize_mx"
    src = _tile(src, "src", op, loc)
    dst = _tile(dst, "dst", op, loc)
    dst_scale = _tile(dst_scale, "dst_scale", op, loc)
    _dtype(src, QUANTIZE_SOURCES, "src", op, loc)
    if dst.dtype.name == "float4_e2m1fn_x4":
        raise error(
            f"{op}: dst is float4_e2m1fn_x4; quantize_mx writes MXFP8 only "
            "(float8_e4m3fn_x4 or float8_e5m2_x4)",
            "dtype",
            loc,
        )
    _dtype(dst, FP8_X4, "dst", op, loc)
    p = src.shape[0]
    if p % PARTITION_QUADRANT or not 0 < p <= MAX_CONTRACTION:
        raise error(
            f"{op}: src {list(src.shape)} has {p} partitions; it must have a multiple of 32, "
            "at most 128",
            "shape",
            loc,
        )
    if dst.shape[0] != p or _free(src) != 4 * _free(dst):
        raise error(
            f"{op}: dst {list(dst.shape)} does not fit src {list(src.shape)}: dst has src's "
            "partitions and a quarter of its elements per partition (4 values per element)",
            "shape",
            loc,
        )
    _scales(dst_scale, p, _free(dst), True, "dst_scale", op, loc)
    current().emit("quantize_mx", "vector", dst, [src, None, dst_scale], loc=loc)


def nc_matmul_mx(
    dst=None,
    stationary=None,
    moving=None,
    stationary_scale=None,
    moving_scale=None,
    tile_position=None,
    tile_size=None,
    accumulate=None,
    name=None,
    **kwargs,
) -> None:
    """``dst[M, N] (+)= stationary.T @ moving`` of MX x4 matrices with their
    block scales applied (Tensor engine). ``tile_position``/``tile_size``
    (row tiling) place the matmul on the array and change no value."""
    loc = user_location()
    op = "nc_matmul_mx"
    st = _tile(stationary, "stationary", op, loc)
    mv = _tile(moving, "moving", op, loc)
    st_scale = _tile(stationary_scale, "stationary_scale", op, loc)
    mv_scale = _tile(moving_scale, "moving_scale", op, loc)
    dst = _tile(dst, "dst", op, loc, PSUM)
    _dtype(st, MX_X4, "stationary", op, loc)
    _dtype(mv, MX_X4, "moving", op, loc)
    _dtype(dst, MATMUL_RESULTS, "dst", op, loc)
    for what, v in (("stationary", st), ("moving", mv), ("dst", dst)):
        if v.ndim < 2:
            raise error(
                f"{op}: {what} {list(v.shape)} needs a partition and a free dimension",
                "matmul-shape",
                loc,
            )
    # Free dimensions count row-major (a [K, 1, M] stationary is [K, M]).
    k, m, n = st.shape[0], _free(st), _free(mv)
    if mv.shape[0] != k:
        raise error(
            f"{op}: stationary {list(st.shape)} and moving {list(mv.shape)} differ in the "
            "contraction (partition) dimension",
            "matmul-shape",
            loc,
        )
    limits = (
        (k, MAX_CONTRACTION, "contraction (partitions)"),
        (m, MAX_STATIONARY_FREE, "stationary free size"),
        # A PSUM bank's 2 KiB per partition: 512 fp32 (the guide's moving
        # tile), 1024 bf16 results (NKI-lib's down projection uses those).
        (n, MAX_MOVING_FREE * 4 // dst.dtype.itemsize, "moving free size"),
    )
    for size, limit, what in limits:
        if size > limit:
            raise error(f"{op}: {what} {size} exceeds {limit}", "matmul-shape", loc)
    if dst.shape[0] != m or _free(dst) != n:
        raise error(
            f"{op}: dst {list(dst.shape)} must be [{m}, {n}] (stationary free x moving free "
            "elements)",
            "matmul-shape",
            loc,
        )
    _scales(st_scale, k, m, False, "stationary_scale", op, loc)
    _scales(mv_scale, k, n, False, "moving_scale", op, loc)
    t = current()
    key = (dst.buf.index, dst.offset, dst.shape, dst.strides)
    if accumulate is None:
        accumulate = key in t.matmul_written
    t.matmul_written.add(key)
    # Scales beyond the matrix's columns are not read: the records take the
    # first M / N elements per partition.
    st_scale = _first_columns(st_scale, m)
    mv_scale = _first_columns(mv_scale, n)
    t.emit("mx_load_stationary", "tensor", None, [st, st_scale], loc=loc)
    flags = _ACCUMULATE if accumulate else 0
    t.emit("matmul_mx", "tensor", dst, [mv, mv_scale], flags=flags, loc=loc)


def _first_columns(scale: View, count: int) -> View:
    if _free(scale) == count:
        return scale
    if scale.ndim != 2:
        raise error(
            f"nc_matmul_mx: a scale tile {list(scale.shape)} with more than the matrix's "
            "columns must be 2-D",
            "shape",
            user_location(),
        )
    return View(scale.buf, scale.offset, (scale.shape[0], count), scale.strides)


# What may touch MX packed tiles: moves of their bits (DMA, copies between
# two tiles of one packed type, a fill) and the MX instructions. Arithmetic
# has no meaning on packed values.
_PACKED_OPS = (
    "copy",
    "dma_dynamic",
    "raw_copy",
    "memset",
    "quantize_mx",
    "mx_load_stationary",
    "matmul_mx",
)


def check_packed_operands(op: str, dst, srcs, loc) -> None:
    views = [v for v in (dst, *srcs) if isinstance(v, View)]
    packed = sorted({v.dtype.name for v in views if is_mx(v.dtype)})
    if op not in _PACKED_OPS:
        raise error(
            f"{packed[0]} tiles (MX packed values) take no arithmetic: only DMAs, copies to "
            "the same type, quantize_mx and nc_matmul_mx use them",
            "dtype",
            loc,
        )
    if op in ("copy", "dma_dynamic"):
        data = [v for v in views[:2]]
        if len({v.dtype for v in data}) > 1:
            names = " to ".join(v.dtype.name for v in reversed(data))
            raise error(
                f"a copy from {names}: MX packed values move only between tensors of the same "
                "packed type (view a container with .ap(dtype=...) instead)",
                "dtype",
                loc,
            )
