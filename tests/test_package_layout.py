"""The Python package's shape: no import cycles between its modules, nor between
its packages; and every import inside a function says why it is there.

Every import counts, function-local ones included: a lazy import that closes a
cycle still ties the two modules together (a change to either can break the
other's import order). Names read from a package's ``__init__`` count as an
edge to the package; submodules (and the ``_C`` extension) count as edges to
themselves.

Importing any module of a package runs the package's ``__init__`` first, which
imports its parts: two packages whose modules import each other's are one import
cycle, whichever modules the imports name (``compile/program.py`` importing
``neuron/errors.py`` ran ``neuron/__init__.py``, which imported
``compile/metrics.py``). So the packages of torch_neuronx (``compile``, ``neuron``,
...) must import each other one way only.

An import inside a function is kept only for a reason, given by a comment on its
line or just above it (an import right after another shares its comment):
``lazy:`` it costs real import time where it would be imported (Inductor,
Dynamo, DTensor...; ``import torch`` imports torch_neuronx), ``cycle:`` it breaks
an import cycle, ``optional:`` the package may be absent, ``order:`` it must
follow a registration step (torch_neuronx/__init__.py).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "torch_neuronx"
EXTENSIONS = {"torch_neuronx._C", "torch_neuronx._mx_numpy"}


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    deps = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            deps.update(a.name for a in node.names if a.name in mods)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [f"{target}.{a.name}" for a in node.names]
            deps.update(n for n in names if n in mods)
            if any(n not in mods and n not in EXTENSIONS for n in names) and target in mods:
                deps.add(target)  # attributes of the package (or module) itself
    deps.discard(name)
    return deps


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_between_modules():
    mods = _modules()
    assert "torch_neuronx.nki.language" in mods and "torch_neuronx.compile.backend" in mods
    graph = {name: _imports(name, path, mods) for name, path in mods.items()}
    assert "torch_neuronx.nki.view" in graph["torch_neuronx.nki.language"]
    assert _cycles(graph) == []


def _unit(name: str) -> str:
    """The package a module belongs to (``torch_neuronx.compile`` for
    ``torch_neuronx.compile.backend``); a top-level module is its own."""
    parts = name.split(".")
    if len(parts) > 1 and (PACKAGE / parts[1]).is_dir():
        return ".".join(parts[:2])
    return name


def _package_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {_unit(name): set() for name in mods}
    for name, path in mods.items():
        graph[_unit(name)].update(_unit(d) for d in _imports(name, path, mods))
    for unit, deps in graph.items():
        deps.discard(unit)
    return graph


def test_no_import_cycles_between_packages():
    mods = _modules()
    graph = _package_graph(mods)
    assert "torch_neuronx.neuron" in graph["torch_neuronx.compile"]  # program.py's DeviceError
    assert _cycles(graph) == []


# -- imports inside functions -------------------------------------------------------------

REASONS = re.compile(r"\b(lazy|cycle|optional|order):")
# torch_neuronx/nki/ keeps its own import rules.
UNCHECKED = ("nki",)


def _comments(source: str) -> dict[int, str]:
    """The comment on each line that has one."""
    return {
        tok.start[0]: tok.string
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }


def _unexplained_imports(source: str) -> list[int]:
    """The lines of the imports inside functions that give no reason (module
    docstring): none on the statement's lines, in the comment lines just above it,
    or on an import of the same run of imports before it."""
    lines = source.splitlines()
    comments = _comments(source)

    def reason_at(node: ast.stmt) -> bool:
        own = range(node.lineno, node.end_lineno + 1)
        if any(REASONS.search(comments.get(n, "")) for n in own):
            return True
        n = node.lineno - 1
        while n in comments and lines[n - 1].lstrip().startswith("#"):
            if REASONS.search(comments[n]):
                return True
            n -= 1
        return False

    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            explained = False  # the run of imports so far gave a reason
            for stmt in block:
                if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    explained = explained or reason_at(stmt)
                    if in_function and not explained:
                        found.append(stmt.lineno)
                else:
                    explained = False
        for child in ast.iter_child_nodes(node):
            function = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(child, in_function or function)

    visit(ast.parse(source), False)
    return sorted(found)


def test_the_import_reason_check_finds_imports_without_one():
    source = (
        "import os\n"
        "def f():\n"
        "    import json\n"
        "    # lazy: costs seconds\n"
        "    import torch._inductor\n"
        "\n"
        "    import torch._dynamo\n"
        "    try:\n"
        "        import psutil  # optional: not a dependency\n"
        "    except ImportError:\n"
        "        import pyarrow  # noqa: F401\n"
        "    import torch\n"
        "    x = 1  # lazy: not an import\n"
        "    import numpy\n"
    )
    assert _unexplained_imports(source) == [3, 11, 12, 14]


def test_imports_inside_functions_say_why():
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] in UNCHECKED:
            continue
        for line in _unexplained_imports(path.read_text()):
            missing.append(f"{path.relative_to(PACKAGE.parent)}:{line}")
    assert missing == [], "imports inside functions without a reason (module docstring)"
