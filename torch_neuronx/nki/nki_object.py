"""``nl.NKIObject``: the base class of the objects a kernel builds and passes
around while it is traced — configurations, groups of tensors, tile plans.

NKI documents it as the "base class for NKI kernel dataclasses and
configuration objects", constructed with keyword arguments
(``__init__(self, **kwargs)``). Kernels use it two ways, and both work here:

- as a dataclass base: ``@dataclass class Cfg(nl.NKIObject): n: int = 0`` —
  the dataclass's equality and repr apply, and its constructor's positional
  order, defaults, ``default_factory`` and ``__post_init__``; the constructor
  stays NKI's keyword one (NKI-lib builds such classes with keywords for
  plain, unannotated class attributes, and leaves fields unset), which works
  because each subclass gets NKIObject's ``__init__`` in its own namespace
  and ``@dataclass`` never replaces an ``__init__`` a class defines;
- as a plain base: ``class Dims(nl.NKIObject): B: int; H: int`` with methods,
  built as ``Dims(B=4, H=128)``. Keywords become attributes (any keyword,
  declared or not, as NKI's ``**kwargs`` constructor); a declared field given
  no value and no default stays unset until the kernel assigns it, and
  reading it before then names the field.

Everything here is trace-time Python: an NKIObject never reaches the
simulator. A kernel argument that is one is part of the trace cache's key by
its fields (kernel.py), so an equal configuration reuses the trace and a
changed one re-traces.
"""

from __future__ import annotations

import dataclasses
import inspect
import reprlib
import typing


def _is_class_var(annotation) -> bool:
    if isinstance(annotation, str):  # from __future__ import annotations
        return annotation.startswith(("ClassVar", "typing.ClassVar"))
    return annotation is typing.ClassVar or typing.get_origin(annotation) is typing.ClassVar


def declared_fields(cls) -> list[str]:
    """The fields ``cls`` declares by annotation, base classes' first (the
    order a dataclass gives them)."""
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        if klass is object or klass is NKIObject:
            continue
        for name, annotation in inspect.get_annotations(klass).items():
            if name not in names and not _is_class_var(annotation):
                names.append(name)
    return names


def field_values(obj: NKIObject) -> dict:
    """The object's fields that have a value — declared ones (set, or left at
    their class default) in declaration order, then any other attribute it
    was given."""
    values = {}
    for name in declared_fields(type(obj)):
        try:
            values[name] = object.__getattribute__(obj, name)
        except AttributeError:
            pass  # declared, never set
    for name, value in getattr(obj, "__dict__", {}).items():
        values.setdefault(name, value)
    return values


class NKIObject:
    """Base class of kernel-side objects (NKI's ``nki.language.NKIObject``):
    subclass it, plainly or with ``@dataclass``, and build instances with
    keyword arguments."""

    def __init__(self, *args, **kwargs) -> None:
        cls = type(self)
        is_dataclass = dataclasses.is_dataclass(cls)
        if args:
            if not is_dataclass:
                # NKI's constructor takes keywords only: a positional value has
                # no field to go to.
                raise TypeError(
                    f"{cls.__name__}() takes its fields as keyword arguments "
                    f"({', '.join(declared_fields(cls)) or 'none declared'}), "
                    f"got {len(args)} positional"
                )
            # A @dataclass subclass: positional values in field order, as its
            # own constructor would take them.
            order = [f.name for f in dataclasses.fields(cls) if f.init]
            if len(args) > len(order):
                raise TypeError(
                    f"{cls.__name__}() takes {len(order)} positional arguments "
                    f"({', '.join(order) or 'none'}), got {len(args)}"
                )
            for name, value in zip(order, args, strict=False):
                if name in kwargs:
                    raise TypeError(f"{cls.__name__}() got multiple values for argument {name!r}")
                kwargs[name] = value
        # object.__setattr__: a frozen dataclass's own __setattr__ refuses.
        if is_dataclass:
            for f in dataclasses.fields(cls):
                if f.name not in kwargs and f.default_factory is not dataclasses.MISSING:
                    object.__setattr__(self, f.name, f.default_factory())
                # A plain default is the class attribute; a field without one
                # stays unset until the kernel assigns it (NKI's rule).
        for name, value in kwargs.items():
            object.__setattr__(self, name, value)
        if is_dataclass and hasattr(self, "__post_init__"):
            self.__post_init__()

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        # Put the keyword constructor in the subclass's own namespace unless
        # the class (or a base between it and NKIObject) defines its own:
        # @dataclass then keeps it instead of generating one.
        if "__init__" not in cls.__dict__ and cls.__init__ is NKIObject.__init__:
            cls.__init__ = NKIObject.__init__

    def __getattr__(self, name: str):
        # Only reached when the attribute is missing: say so plainly for a
        # field the class declares but nothing has set yet.
        if not name.startswith("__") and name in declared_fields(type(self)):
            raise AttributeError(
                f"{type(self).__name__}.{name} is declared but was never set: give it to "
                f"the constructor ({type(self).__name__}({name}=...)) or assign it first",
                name=name,
                obj=self,
            )
        raise AttributeError(
            f"{type(self).__name__!r} object has no attribute {name!r}", name=name, obj=self
        )

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in field_values(self).items())
        return f"{type(self).__name__}({fields})"
