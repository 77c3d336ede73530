"""Runs a script as the ranks of one torch.distributed job, bounded in time.

Every rank is a fresh interpreter with torchrun's environment (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT). A rank that fails gives the others a short
grace period (their process group then fails too); past the deadline every rank is
killed, so a hang fails the test instead of stalling the run.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(
    script: str,
    world: int,
    timeout: float = 180,
    env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
    grace: float = 20,
    rank_env: Callable[[int], dict[str, str]] | None = None,
) -> list[subprocess.CompletedProcess]:
    port = free_port()
    procs = []
    files = []
    for rank in range(world):
        # Ranks start from a clean device configuration (and Inductor's default
        # cache, unless the job names one).
        e = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("NEURON_", "TORCH_NEURONX_")) and k != "TORCHINDUCTOR_CACHE_DIR"
        }
        e.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(world),
            LOCAL_WORLD_SIZE=str(world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        e.update(env or {})
        e.update(rank_env(rank) if rank_env else {})
        # Files, not pipes: a rank that writes a lot must not block on a full pipe.
        out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        files.append((out, err))
        procs.append(
            subprocess.Popen([sys.executable, script, *args], env=e, stdout=out, stderr=err)
        )
    deadline = time.monotonic() + timeout
    failed_at = None
    results: list[tuple[str, str] | None] = [None] * world
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
            failed_at = now
        if now > deadline or (failed_at is not None and now > failed_at + grace):
            break
        time.sleep(0.1)
    timed_out = []
    for i, p in enumerate(procs):
        if p.poll() is None:
            p.kill()
            timed_out.append(i)
        p.wait()
        texts = []
        for f in files[i]:
            f.seek(0)
            texts.append(f.read())
            f.close()
        results[i] = (texts[0], texts[1])
    completed = [
        subprocess.CompletedProcess(p.args, p.returncode, *results[i]) for i, p in enumerate(procs)
    ]
    for c, p in zip(completed, procs, strict=True):
        c.pid = p.pid  # for segments_created_by
    if timed_out:
        details = "\n".join(
            f"--- rank {i} (rc={c.returncode})\n{c.stdout[-2000:]}\n{c.stderr[-4000:]}"
            for i, c in enumerate(completed)
        )
        raise AssertionError(f"ranks {timed_out} did not finish in time\n{details}")
    return completed


def segments_created_by(results: list[subprocess.CompletedProcess]) -> list[str]:
    """The shared-memory segments in /dev/shm that the ranks of a finished job created
    and left behind (a segment's prologue holds its creator's pid after a 4-byte
    magic and a 4-byte version). Other jobs' segments, even while they run, are not
    counted."""
    pids = {r.pid for r in results}
    left = []
    for name in os.listdir("/dev/shm"):
        if not name.startswith("tnx-"):
            continue
        try:
            with open(os.path.join("/dev/shm", name), "rb") as f:
                head = f.read(12)
        except OSError:
            continue  # unlinked meanwhile: not left behind
        if len(head) == 12 and int.from_bytes(head[8:12], "little", signed=True) in pids:
            left.append(name)
    return left


def check_all_ok(results: list[subprocess.CompletedProcess]) -> list[str]:
    bad = [i for i, r in enumerate(results) if r.returncode != 0]
    assert not bad, "\n".join(
        f"--- rank {i} (rc={r.returncode})\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
        for i, r in enumerate(results)
    )
    return [r.stdout for r in results]
