"""Running one measurement in a fresh interpreter and reading its result.

The benchmarks measure each device (or mode) in a process of its own: the first
process to touch a device pays its start-up, caches and thread pools are its own, and
one measurement cannot warm the next. The child prints its result as one JSON object
on the last line of its standard output (after anything else it prints).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def run_child(
    script: str,
    args: list[str],
    env: dict[str, str] | None = None,
    timeout: float | None = 1800,
) -> dict:
    """``script`` run with ``args`` by this interpreter (``env`` added to this
    process's environment); its last stdout line, parsed as JSON. A child that fails
    raises with the end of its stderr; one that prints no JSON raises with its stdout."""
    cmd = [sys.executable, os.path.abspath(script), *args]
    done = subprocess.run(
        cmd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode:
        raise RuntimeError(
            f"{' '.join(cmd[1:])} failed (rc={done.returncode}):\n{done.stderr[-3000:]}"
        )
    lines = done.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise RuntimeError(
            f"{' '.join(cmd[1:])} printed no JSON result:\n{done.stdout[-2000:]}"
        ) from None
