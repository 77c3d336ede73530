"""``nki.typing`` / ``neuronxcc.nki.typing`` (``nt``): parameter annotations
and tensor specs.

``def kernel(x, out: nt.mutable_tensor)`` lets the kernel write ``out`` in
place; other arguments are read-only. ``nt.tensor[[8192, 4096], nl.bfloat16]``
describes an argument without data (for ``nki.benchmark`` / estimates).
"""

from __future__ import annotations

from . import dtypes as dt


class TensorSpec:
    """A kernel argument by shape and dtype only."""

    def __init__(self, shape, dtype=dt.float32):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dt.as_dtype(dtype)

    def __repr__(self) -> str:
        return f"nt.tensor[{list(self.shape)}, {self.dtype!r}]"


class _TensorType:
    """``nt.tensor`` (and ``nt.tensor[shape, dtype]``)."""

    def __init__(self, name: str, mutable: bool):
        self._name = name
        self.mutable = mutable

    def __repr__(self) -> str:
        return f"nt.{self._name}"

    def __getitem__(self, key) -> TensorSpec | _TensorType:
        if not isinstance(key, tuple):
            key = (key,)
        if len(key) == 2 and isinstance(key[0], (list, tuple)):
            return TensorSpec(key[0], key[1])
        if all(isinstance(k, int) for k in key):
            return TensorSpec(key)
        if isinstance(key[-1], (int,)) is False and all(isinstance(k, int) for k in key[:-1]):
            return TensorSpec(key[:-1], key[-1])
        return self


tensor = _TensorType("tensor", mutable=False)
mutable_tensor = _TensorType("mutable_tensor", mutable=True)


def is_mutable_annotation(annotation) -> bool:
    if isinstance(annotation, _TensorType):
        return annotation.mutable
    if isinstance(annotation, str):  # from __future__ import annotations
        return annotation.split("[")[0].strip().endswith("mutable_tensor")
    return False
