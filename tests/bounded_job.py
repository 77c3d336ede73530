"""Running a job (a launcher, spawned ranks, a training script) from a test, bounded.

The job runs in a session of its own: on a timeout every process it started is
killed, and the test fails with what the job printed — a hang fails the test
instead of stalling the run, and leaves nothing behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence


def clean_env(*prefixes: str, drop_local: bool = False, **extra: str) -> dict[str, str]:
    """This process's environment without the variables that would steer the job
    (``NEURON_*``, ``TORCH_NEURONX_*`` and ``prefixes``; ``LOCAL_*`` with
    ``drop_local``), plus ``extra``."""
    skip = ("NEURON_", "TORCH_NEURONX_", *prefixes)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(skip) and not (drop_local and "LOCAL_" in k)
    }
    env.update(extra)
    return env


def run_bounded(
    cmd: Sequence[str],
    *,
    env: Mapping[str, str],
    timeout: float,
    cwd: str | os.PathLike | None = None,
    what: str = "job",
) -> tuple[str, str]:
    """``cmd``'s (stdout, stderr); AssertionError if it times out (the whole session
    killed) or exits with an error."""
    p = subprocess.Popen(
        list(cmd),
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"{what} timed out after {timeout} s\n{out}\n{err[-4000:]}") from None
    assert p.returncode == 0, f"{what} failed (rc={p.returncode})\n{out}\n{err[-6000:]}"
    return out, err
