"""The user guide builds, and says what the code does.

- ``mkdocs build --strict``: every page in the navigation, every link and anchor
  resolves (warnings are errors);
- the environment-variable table (docs/environment.md) and the code agree: every
  ``NEURON_*`` / ``TORCH_NEURONX_*`` variable the code reads is in the table, and
  every variable in the table is read somewhere;
- the README's links point at files that exist.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A variable name in a string literal: how Python and C++ code read them
# (os.environ.get("X"), std::getenv("X"), env_flag("X")).
_READ = re.compile(r"""["'](NEURON_[A-Z0-9_]+|TORCH_NEURONX_[A-Z0-9_]+)["']""")
_TABLE_ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]+)` \|", re.M)


def _variables_read_by_code() -> set[str]:
    found = set()
    sources = [ROOT / "_torch_neuronx_nki.py"]
    for folder in ("torch_neuronx", "runtime/src", "runtime/include"):
        sources += [
            p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".cpp", ".h", ".cc")
        ]
    for path in sources:
        found.update(_READ.findall(path.read_text(errors="replace")))
    return found


def _documented_variables() -> set[str]:
    return set(_TABLE_ROW.findall((ROOT / "docs" / "environment.md").read_text()))


def test_every_variable_the_code_reads_is_documented_and_vice_versa():
    read = _variables_read_by_code()
    documented = _documented_variables()
    assert {"NEURON_RT_VISIBLE_CORES", "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"} <= read
    assert not read - documented, f"read by the code, missing from docs: {read - documented}"
    # TORCH_DEVICE_BACKEND_AUTOLOAD is torch's own switch (read by torch).
    unknown = documented - read - {"TORCH_DEVICE_BACKEND_AUTOLOAD"}
    assert not unknown, f"documented but read nowhere: {unknown}"


def test_the_guide_builds_with_warnings_as_errors(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "architecture" / "index.html").exists()
    assert (tmp_path / "site" / "performance" / "index.html").exists()


def test_readme_is_a_front_page_whose_links_resolve():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert targets, "the README links to the guide"
    missing = [t for t in targets if not t.startswith("http") and not (ROOT / t).exists()]
    assert not missing, missing
    assert "bash scripts/run_demo.sh" in text and "bash scripts/run_tests.sh" in text
