"""One-off generator for ``corpus.txt``: docstrings of Python standard-library modules.

The shipped ``corpus.txt`` is the output of this script under CPython 3.11. It is kept
only so the corpus can be regenerated or audited; training never runs it. The exact
text depends on the Python version, which is why the output is committed rather than
generated at training time.

Usage (from the repo root)::

    python examples/gpt/data/make_corpus.py
"""

from __future__ import annotations

import importlib
import inspect
import string
import sys
from pathlib import Path

# A fixed, ordered module list keeps the output reproducible for a given Python
# version; scanning sys.stdlib_module_names would depend on what is installed.
MODULES = [
    "abc", "argparse", "array", "ast", "asyncio", "base64", "bisect", "calendar",
    "collections", "contextlib", "copy", "csv", "dataclasses", "datetime", "decimal",
    "difflib", "email", "enum", "fractions", "functools", "gzip", "hashlib", "heapq",
    "html", "http.client", "inspect", "io", "ipaddress", "itertools", "json",
    "logging", "math", "operator", "os", "pathlib", "pickle", "pprint", "queue",
    "random", "re", "shutil", "socket", "sqlite3", "statistics", "string", "struct",
    "subprocess", "tarfile", "tempfile", "textwrap", "threading", "time", "timeit",
    "tokenize", "typing", "unittest", "urllib.parse", "uuid", "weakref", "zipfile",
]  # fmt: skip

TARGET_BYTES = 200_000
# Restricting to printable ASCII keeps the vocabulary small (<100 symbols), so the
# model spends its capacity on structure rather than rare characters.
ALLOWED = set(string.printable) - {"\r", "\x0b", "\x0c"}


def _docs(module) -> list[str]:
    docs = [inspect.getdoc(module) or ""]
    for name, obj in sorted(vars(module).items()):
        if name.startswith("_"):
            continue
        # Skip re-exported objects so each docstring appears once in the corpus.
        if getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(obj) or inspect.isroutine(obj):
            docs.append(inspect.getdoc(obj) or "")
    return [d for d in docs if len(d) > 40]


def main() -> None:
    out: list[str] = []
    size = 0
    for mod_name in MODULES:
        module = importlib.import_module(mod_name)
        for doc in _docs(module):
            text = "".join(c for c in doc if c in ALLOWED).strip() + "\n\n"
            out.append(text)
            size += len(text)
            if size >= TARGET_BYTES:
                break
        if size >= TARGET_BYTES:
            break
    path = Path(__file__).with_name("corpus.txt")
    path.write_text("".join(out), encoding="ascii")
    print(f"wrote {size} chars to {path} (python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
