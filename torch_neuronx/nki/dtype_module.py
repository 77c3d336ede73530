"""``import nki.dtype``: NKI's module of element types (``nki.dtype.float8_e4m3``,
``import nki.dtype as nt; nt.bfloat16``), which is also the name kernels
annotate with (``dtype: nki.dtype = nl.bfloat16``) and test against
(``isinstance(d, nki.dtype)``).

In NKI, ``nki.dtype`` is both a module and the element type's name; Python
gives a package attribute one value, and importing the submodule replaces
the other. So the module answers ``isinstance`` as the type does (Python
asks the class of the second argument of isinstance for
``__instancecheck__``, module or not): ``nki.dtype`` works either way,
before and after ``import nki.dtype``.
"""

from __future__ import annotations

import types

from . import dtypes as _dtypes


class DTypeModule(types.ModuleType):
    """A module that is also usable as the element type in ``isinstance``."""

    def __instancecheck__(self, obj) -> bool:
        return isinstance(obj, _dtypes.DType)

    def __call__(self, x):
        """``nki.dtype(x)``: the element type that ``x`` names (a name, a
        NumPy or torch type, or an element type)."""
        return _dtypes.as_dtype(x)


# The names the module holds: every element type under each of its names.
NAMES = {name: d for name, d in _dtypes._BY_NAME.items() if name.isidentifier()}
NAMES["bool"] = _dtypes.bool_
