"""Element types of NKI tiles: ``nl.float32``, ``nl.bfloat16``, ... and how
torch and NumPy types map to them. Their codes, sizes and kinds are the
simulator's (runtime/include/neuron_runtime/nki/dtype.h, through layout.py)."""

from __future__ import annotations

import numpy as np

from . import layout


class DType:
    """An NKI element type (``nki.dtype``). Compares equal to its name, its
    NumPy type and its torch dtype, so kernels may test ``a.dtype ==
    nl.bfloat16`` or pass ``dtype=np.float32`` alike.

    NKI's types are NumPy types by name: ``str(nl.float32) == "float32"``
    (kernels compare ``str(t.dtype) == str(nl.bfloat16)``), and
    ``np.dtype(nl.bfloat16)`` is the NumPy type of the arrays the simulator
    reads and writes for it (through ``.dtype``, NumPy's protocol; bfloat16
    and fp8 come from ml_dtypes)."""

    __slots__ = ("name", "code", "itemsize", "is_float", "is_signed")

    def __init__(self, name: str, code: int, itemsize: int, is_float: bool, is_signed: bool):
        self.name = name
        self.code = code
        self.itemsize = itemsize
        self.is_float = is_float
        self.is_signed = is_signed

    def __repr__(self) -> str:
        return f"nl.{self.name}"

    def __str__(self) -> str:
        return self.name

    @property
    def dtype(self) -> np.dtype:
        """The NumPy type of this element type: what ``np.dtype(nl.X)``,
        ``np.zeros(n, nl.X)`` and ``a.astype(nl.X)`` use."""
        return np.dtype(numpy_dtype(self))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DType):
            return other.code == self.code
        try:
            return as_dtype(other).code == self.code
        except (TypeError, ValueError):
            return False

    def __hash__(self) -> int:
        return hash(self.name)

    @property
    def is_simulated(self) -> bool:
        """Whether the simulator has this type (the MX packed types not yet)."""
        return self.code >= 0

    @property
    def itemsize_bits(self) -> int:
        return self.itemsize * 8


# Every element type the simulator has, in code order.
ALL = tuple(DType(**t) for t in layout.DTYPES)
_BY_NAME = {d.name: d for d in ALL}

# NKI's MX (microscaling) packed types, four fp8 or fp4 values to an element
# (32 bits for fp8, 16 for fp4), for quantize_mx / nc_matmul_mx (mx.py).
float8_e4m3fn_x4 = _BY_NAME["float8_e4m3fn_x4"]
float8_e5m2_x4 = _BY_NAME["float8_e5m2_x4"]
float4_e2m1fn_x4 = _BY_NAME["float4_e2m1fn_x4"]
MX_PACKED = (float8_e4m3fn_x4, float8_e5m2_x4, float4_e2m1fn_x4)

float32 = _BY_NAME["float32"]
bfloat16 = _BY_NAME["bfloat16"]
float16 = _BY_NAME["float16"]
# NKI's two 8-bit E4M3 types, distinct as in NKI: float8_e4m3 is IEEE-style
# (±inf and NaNs in the top exponent, max 240; ml_dtypes.float8_e4m3, no
# torch type), float8_e4m3fn has no inf and one NaN per sign (S.1111.111),
# max 448 (torch.float8_e4m3fn, ml_dtypes.float8_e4m3fn).
float8_e4m3 = _BY_NAME["float8_e4m3"]
float8_e4m3fn = _BY_NAME["float8_e4m3fn"]
float8_e5m2 = _BY_NAME["float8_e5m2"]
int32 = _BY_NAME["int32"]
uint32 = _BY_NAME["uint32"]
int16 = _BY_NAME["int16"]
uint16 = _BY_NAME["uint16"]
int8 = _BY_NAME["int8"]
uint8 = _BY_NAME["uint8"]
bool_ = _BY_NAME["bool"]
# The Tensor engine's fp32 mode with a 10-bit mantissa: stored as fp32.
tfloat32 = float32

_BY_NAME.update(
    {
        "float": float32,
        "fp32": float32,
        "bf16": bfloat16,
        "half": float16,
        "fp16": float16,
        # NKI's older spelling of float8_e4m3 (the IEEE-style type).
        "float8e4": float8_e4m3,
        "float8e5": float8_e5m2,
        "bool_": bool_,
        "tfloat32": float32,
    }
)


def as_dtype(x) -> DType:
    """The NKI type of ``x``: an NKI type, a name, a NumPy or torch type."""
    if isinstance(x, DType):
        return x
    if x is None:
        raise TypeError("a dtype is required")
    if x is bool:
        return bool_
    if x is float:
        return float32
    if x is int:
        return int32
    name = getattr(x, "name", None) if not isinstance(x, str) else x
    if name is None:
        try:
            name = np.dtype(x).name
        except TypeError:
            name = str(x)
    name = str(name).replace("torch.", "")
    d = _BY_NAME.get(name)
    if d is None:
        raise TypeError(f"NKI has no element type {x!r}")
    return d


def torch_dtype(d: DType):
    """The torch dtype of tensors of ``d``. ``nl.float8_e4m3`` (IEEE-style,
    max 240) has no torch type of its own (torch's only E4M3 is float8_e4m3fn,
    max 448): a kernel result of it comes back as a torch.float8_e4m3fn
    tensor holding the same values. Its bytes are the same: the simulator
    saturates on store (no result element is e4m3's inf, 0x78), writes NaN as
    0x7f (NaN in both), and every finite e4m3 value has the same code in
    e4m3fn. (Torch float8_e4m3fn *arguments* are nl.float8_e4m3fn.)"""
    import torch

    if d.name == "float8_e4m3":
        return torch.float8_e4m3fn
    if d in MX_PACKED:
        # Torch has no MX packed types: their containers, as NKI's MX guide
        # passes them (a kernel views a container tensor as its x4 type).
        return torch.uint16 if d.itemsize == 2 else torch.uint32
    return {
        "float32": torch.float32,
        "bfloat16": torch.bfloat16,
        "float16": torch.float16,
        "float8_e4m3fn": torch.float8_e4m3fn,
        "float8_e5m2": torch.float8_e5m2,
        "int32": torch.int32,
        "uint32": torch.uint32,
        "int16": torch.int16,
        "uint16": torch.uint16,
        "int8": torch.int8,
        "uint8": torch.uint8,
        "bool": torch.bool,
    }[d.name]


def numpy_dtype(d: DType):
    """The NumPy type for arrays of ``d`` (bfloat16 and fp8 need ml_dtypes)."""
    if d in MX_PACKED:
        return mx_numpy_dtype(d)
    if d.name in ("bfloat16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2"):
        try:
            import ml_dtypes
        except ImportError as e:
            raise TypeError(
                f"NumPy has no {d.name}: install ml_dtypes to simulate kernels on {d.name} arrays"
            ) from e
        return {
            "bfloat16": ml_dtypes.bfloat16,
            "float8_e4m3": ml_dtypes.float8_e4m3,
            "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
            "float8_e5m2": ml_dtypes.float8_e5m2,
        }[d.name]
    return np.dtype("bool" if d.name == "bool" else d.name)


def promote(a: DType, b: DType) -> DType:
    """The result type of a binary op on tiles of types a and b (NKI widens
    to the wider float; float beats int; of the two E4M3 types, the wider
    range: float8_e4m3fn)."""
    if a == b:
        return a
    if a.is_float != b.is_float:
        return a if a.is_float else b
    if a.is_float:
        order = [float8_e5m2, float8_e4m3, float8_e4m3fn, bfloat16, float16, float32]
        if {a.name, b.name} == {"bfloat16", "float16"}:
            return float32
        return max(a, b, key=order.index)
    return a if a.itemsize >= b.itemsize else b


def mx_numpy_dtype(d: DType):
    """The NumPy type of MX packed arrays: NumPy types named as NKI's
    (``str(a.dtype) == "float8_e4m3fn_x4"``, 4 or 2 bytes an element, viewable
    as uint32 / uint16) from the ``torch_neuronx._mx_numpy`` extension; without
    it, the containers uint32 / uint16."""
    try:
        from .. import _mx_numpy
    except ImportError:
        return np.dtype(np.uint16 if d.itemsize == 2 else np.uint32)
    return np.dtype(getattr(_mx_numpy, d.name))
