"""Forked children: a clear error once the parent started the runtime; spawn works.

The scenarios run in one fresh interpreter, once per module (forking the pytest
process, whose runtime threads are running, is not something a test should do): a
child forked before the runtime started, then, once the parent started it, an
os.fork child, a multiprocessing fork child, a spawned child, a forkserver child
and DataLoader fork and forkserver workers (forkserver: Linux's default start
method from Python 3.14 on). The tests read its report.
"""

import json

import pytest
import torch

SCRIPT = r"""
import json
import multiprocessing as mp
import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset


def use_neuron(q):
    try:
        t = torch.arange(4.0, device="neuron") * 2
        q.put({"ok": t.sum().item()})
    except Exception as e:
        q.put({"error": type(e).__name__, "message": str(e)})


def run_in(ctx_name):
    ctx = mp.get_context(ctx_name)
    q = ctx.Queue()
    p = ctx.Process(target=use_neuron, args=(q,))
    p.start()
    r = q.get(timeout=120)
    p.join(timeout=120)
    r["exitcode"] = p.exitcode
    return r


def os_fork():
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        out = {}
        for name, f in [
            ("tensor", lambda: torch.ones(2, device="neuron")),
            ("synchronize", torch.neuron.synchronize),
            ("to", lambda: torch.ones(2).to("neuron")),
            ("memory_fraction", lambda: torch.neuron.set_per_process_memory_fraction(0.5)),
            ("mem_get_info", torch.neuron.mem_get_info),
        ]:
            try:
                f()
                out[name] = None
            except RuntimeError as e:
                out[name] = str(e)
        out["is_initialized"] = torch.neuron.is_initialized()
        out["device_count"] = torch.neuron.device_count()  # a query, no device use
        # The parent's allocator state is not the child's: nothing to report.
        out["allocated"] = torch.neuron.memory_allocated()
        out["snapshot"] = torch.neuron.memory_snapshot()
        os.write(wfd, json.dumps(out).encode())
        os._exit(0)
    os.close(wfd)
    data = b""
    while chunk := os.read(rfd, 65536):
        data += chunk
    _, status = os.waitpid(pid, 0)
    r = json.loads(data)
    r["status"] = status
    return r


class Squares(Dataset):
    def __init__(self, touch_device=False):
        self.touch_device = touch_device

    def __len__(self):
        return 16

    def __getitem__(self, i):
        if self.touch_device:
            torch.ones(1, device="neuron")  # not allowed in a forked worker
        return torch.tensor([float(i * i)])


def data_loading():
    w = torch.ones(1, device="neuron")
    total = torch.zeros(1, device="neuron")
    # Forked workers that only make CPU batches are fine (the usual data loading).
    for batch in DataLoader(Squares(), batch_size=4, num_workers=2,
                            multiprocessing_context="fork"):
        total += batch.to("neuron").sum() * w
    r = {"total": total.item()}
    try:
        list(DataLoader(Squares(touch_device=True), batch_size=4, num_workers=1,
                        multiprocessing_context="fork", timeout=120))
        r["worker_error"] = None
    except RuntimeError as e:
        r["worker_error"] = str(e)
    # Python 3.14's default start method on Linux: the workers come from a
    # server process that never started the runtime.
    total.zero_()
    for batch in DataLoader(Squares(), batch_size=4, num_workers=2,
                            multiprocessing_context="forkserver", timeout=120):
        total += batch.to("neuron").sum() * w
    r["forkserver_total"] = total.item()
    r["parent_still_works"] = (w * 3).tolist()
    return r


if __name__ == "__main__":
    # Forking before the runtime started is fine: the child starts its own.
    r = {"before_init": {"mp_fork": run_in("fork")}}
    torch.ones(1, device="neuron").sum().item()  # the parent starts the runtime
    r["before_init"]["parent_still_works"] = (torch.ones(3, device="neuron") + 1).tolist()
    r["os_fork"] = os_fork()
    r["mp_fork"] = run_in("fork")
    r["spawn"] = run_in("spawn")
    r["forkserver"] = run_in("forkserver")
    r["parent_still_works"] = (torch.ones(3, device="neuron") + 1).tolist()
    r["data_loading"] = data_loading()
    print(json.dumps(r))
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory, run_py, check):
    script = tmp_path_factory.mktemp("fork") / "fork_script.py"  # spawn needs a file
    script.write_text(SCRIPT)
    return json.loads(check(run_py(str(script), timeout=240)).splitlines()[-1])


def test_fork_after_init_and_spawn(report):
    r = report
    child = r["os_fork"]
    assert child["status"] == 0, "the forked child crashed"
    for use in ("tensor", "synchronize", "to", "memory_fraction", "mem_get_info"):
        msg = child[use]
        assert msg is not None, f"{use} worked in a child forked after initialisation"
        assert "forked subprocess" in msg, msg
        assert "'spawn'" in msg, msg
    assert child["is_initialized"] is False
    assert child["device_count"] >= 1
    assert child["allocated"] == 0 and child["snapshot"] == []

    mp_fork = r["mp_fork"]
    assert mp_fork.get("error") == "RuntimeError", mp_fork
    assert "'spawn'" in mp_fork["message"]
    assert mp_fork["exitcode"] == 0  # an exception, not a crash

    assert r["spawn"] == {"ok": 12.0, "exitcode": 0}
    # The forkserver's children never inherit a started runtime: they use their own.
    assert r["forkserver"] == {"ok": 12.0, "exitcode": 0}
    assert r["parent_still_works"] == [2.0, 2.0, 2.0]

    # Forking before the runtime started is fine: the child starts its own.
    rb = r["before_init"]
    assert rb["mp_fork"] == {"ok": 12.0, "exitcode": 0}
    assert rb["parent_still_works"] == [2.0, 2.0, 2.0]


def test_in_bad_fork_flag_is_false_in_a_normal_process():
    assert torch.neuron._is_in_bad_fork() is False


def test_dataloader_fork_workers_after_init(report):
    r = report["data_loading"]
    assert r["total"] == float(sum(i * i for i in range(16)))
    msg = r["worker_error"]
    assert msg is not None, "a forked worker used the device"
    assert "DataLoader worker" in msg and "'spawn'" in msg, msg
    assert r["forkserver_total"] == float(sum(i * i for i in range(16)))
    assert r["parent_still_works"] == [3.0]
