"""Shared by the parallelism worker scripts: process-group setup on this rank's
neuron device, checks collected as they run, and the closing line the tests read.

A worker calls ``setup()`` first, ``expect_close`` / ``expect`` for each check,
and ``finish()`` last: it prints one ``FAIL`` line per failed check and
``DONE <n> checks, <k> failed``, and exits non-zero when a check failed.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
local = int(os.environ["LOCAL_RANK"])
dev = torch.device("neuron", local)

_failures: list[str] = []
_checks = 0


def setup(backend: str = "neuron", bind_device: bool = False) -> None:
    """``bind_device`` passes ``device_id`` (eager initialisation): DeviceMesh then
    creates its sub-groups with ``split_group`` (see split_worker.py)."""
    torch.neuron.set_device(local)
    kw = {"device_id": dev} if bind_device else {}
    dist.init_process_group(backend, timeout=timedelta(seconds=90), **kw)


def _cpu(x):
    if isinstance(x, torch.Tensor):
        from torch.distributed.tensor import DTensor

        if isinstance(x, DTensor):
            x = x.full_tensor()
        return x.detach().cpu()
    return x


def expect(name: str, ok: bool, detail: object = "") -> None:
    global _checks
    _checks += 1
    if not ok:
        _failures.append(f"{name}: {str(detail)[:400]}")


def expect_close(name: str, got, want, rtol: float = 1.3e-6, atol: float = 1e-5) -> None:
    """torch.testing.assert_close on CPU copies (a DTensor is compared whole)."""
    global _checks
    _checks += 1
    try:
        torch.testing.assert_close(_cpu(got), _cpu(want), rtol=rtol, atol=atol)
    except AssertionError as e:
        _failures.append(f"{name}: {str(e)[:400]}")


def finish() -> None:
    torch.neuron.synchronize()
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    for f in _failures:
        print("FAIL", f)
    print(f"DONE {_checks} checks, {len(_failures)} failed", flush=True)
    sys.exit(1 if _failures else 0)
