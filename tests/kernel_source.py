"""Where things are in a kernel's source, as tests of error locations need."""

import inspect


def line_of(fn, text: str, after: str | None = None) -> int:
    """The file line of the first source line of ``fn`` containing ``text``
    (at or after the first line containing ``after``, when given)."""
    src, start = inspect.getsourcelines(fn)
    k = 0 if after is None else next(i for i, line in enumerate(src) if after in line)
    for i in range(k, len(src)):
        if text in src[i]:
            return start + i
    raise AssertionError(text)
