"""Processes: a lazy runtime, spawned workers on their own devices, and neuron tensors
refused clearly (never a crash or a hang) when sent to another process.

Every scenario runs in a fresh interpreter with bounded timeouts on each child; spawn
needs a real file for ``__main__``, so the scripts are written to tmp_path.
"""

import json

# --- the runtime starts on first use -----------------------------------------------------

LAZY_SCRIPT = r"""
import json, os, sys

def threads():
    return len(os.listdir("/proc/self/task"))

def vm_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmSize:"):
            return int(line.split()[1])

import torch
r = {"after_torch": threads(), "autoloaded": "torch_neuronx" in sys.modules}
import torch_neuronx
r["after_import"] = threads()
vm0 = vm_kib()
# Queries that must not start the runtime.
r["count"] = torch.neuron.device_count()
r["available"] = torch.neuron.is_available()
r["allocated"] = torch.neuron.memory_allocated()
r["stats"] = len(torch.neuron.memory_stats())
r["summary"] = "Allocated memory" in torch.neuron.memory_summary()
r["snapshot"] = torch.neuron.memory._snapshot()
r["fraction"] = torch.neuron.get_per_process_memory_fraction()
r["meta"] = str(torch.empty(3, device="meta").device)
r["after_queries"] = threads()
r["initialized_before_use"] = torch.neuron.is_initialized()
r["vm_growth_before_use_kib"] = vm_kib() - vm0
(torch.ones(4, device="neuron") * 2).sum().item()
r["initialized_after_use"] = torch.neuron.is_initialized()
r["after_use"] = threads()
r["vm_growth_after_use_kib"] = vm_kib() - vm0
r["capacity_kib"] = torch.neuron.get_device_properties(0).total_memory // 1024
print(json.dumps(r))
"""


def test_import_starts_no_threads_and_reserves_no_memory(run_py_many, check):
    off, on = run_py_many(
        [(LAZY_SCRIPT, {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}), (LAZY_SCRIPT, None)], timeout=120
    )
    r = json.loads(check(off).splitlines()[-1])
    assert r["autoloaded"] is False
    assert r["after_import"] == r["after_torch"], "importing torch_neuronx started threads"
    assert r["after_queries"] == r["after_torch"], "a query started the runtime's threads"
    assert r["initialized_before_use"] is False
    assert r["count"] >= 1 and r["available"] is True
    assert r["allocated"] == 0 and r["stats"] == 0 and r["summary"]
    assert r["snapshot"] == {"segments": [], "device_traces": []}
    assert r["fraction"] == 1.0
    # No HBM arena yet: the address space did not grow by anything like a core's HBM.
    assert r["vm_growth_before_use_kib"] < r["capacity_kib"] // 4
    # First use starts the runtime: its workers and its arena appear.
    assert r["initialized_after_use"] is True
    assert r["after_use"] > r["after_torch"]
    assert r["vm_growth_after_use_kib"] >= r["capacity_kib"]

    # With autoloading (the default), `import torch` alone loads the backend and
    # starts nothing either.
    ra = json.loads(check(on).splitlines()[-1])
    assert ra["autoloaded"] is True
    assert ra["after_torch"] == r["after_torch"]
    assert ra["initialized_before_use"] is False


# --- spawned workers ------------------------------------------------------------------

SPAWN_SCRIPT = r"""
import json
import sys

import torch
import torch.multiprocessing as mp


def worker(rank, q, done):
    torch.neuron.set_device(rank)
    x = torch.arange(12.0, device="neuron").reshape(3, 4) + rank
    w = torch.full((4, 2), float(rank + 1), device=f"neuron:{rank}")
    y = torch.relu(x @ w - 10)
    q.put((rank, str(y.device), torch.neuron.current_device(), y.cpu()))
    # A CPU tensor travels as a shared-memory fd that the sender must keep
    # until the receiver has it (torch.multiprocessing's rule).
    done.wait(timeout=120)


if __name__ == "__main__":
    # The parent uses the device first: spawned children start their own runtime.
    torch.ones(2, device="neuron").sum().item()
    ctx = mp.get_context("spawn")
    q, done = ctx.Queue(), ctx.Event()
    pc = mp.spawn(worker, args=(q, done), nprocs=2, join=False)
    got = {}
    for _ in range(2):
        rank, dev, cur, y = q.get(timeout=120)
        x = torch.arange(12.0).reshape(3, 4) + rank
        w = torch.full((4, 2), float(rank + 1))
        got[rank] = {
            "device": dev,
            "current": cur,
            "is_cpu": y.device.type == "cpu",
            "match": torch.equal(y, torch.relu(x @ w - 10)),
        }
    done.set()
    while not pc.join(timeout=120):
        pass
    print(json.dumps({"results": got, "exitcodes": [p.exitcode for p in pc.processes]}))
"""


def test_spawn_workers_each_on_their_own_device(tmp_path, run_py, check, two_devices):
    script = tmp_path / "spawn_workers.py"
    script.write_text(SPAWN_SCRIPT)
    r = json.loads(check(run_py(str(script), timeout=180)).splitlines()[-1])
    assert r["exitcodes"] == [0, 0]
    for rank in (0, 1):
        res = r["results"][str(rank)]
        assert res == {
            "device": f"neuron:{rank}",
            "current": rank,
            "is_cpu": True,
            "match": True,
        }, res


# --- sending neuron tensors to another process -----------------------------------------

SEND_SCRIPT = r"""
import json
import sys
import warnings

import torch
import torch.multiprocessing as mp


def receive(q, out):
    # Reports what get() did: an object or an exception (never waits forever).
    for _ in range(2):
        try:
            obj = q.get(timeout=60)
            out.put({"got": repr(type(obj).__name__), "value": obj.tolist()})
        except Exception as e:
            out.put({"error": type(e).__name__, "message": str(e)})


def add_one(t):
    t.add_(1)


def attempt(f):
    try:
        f()
        return None
    except Exception as e:
        return {"error": type(e).__name__, "message": str(e)}


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    t = torch.arange(4.0, device="neuron")
    r = {}
    # Pickled in the sender: an error at the call.
    r["process_arg"] = attempt(lambda: ctx.Process(target=print, args=(t,)).start())
    r["spawn_arg"] = attempt(lambda: mp.spawn(print, args=(t,), nprocs=1, join=True))
    sq = ctx.SimpleQueue()
    r["simple_queue"] = attempt(lambda: sq.put(t))
    a, b = ctx.Pipe()
    r["pipe"] = attempt(lambda: a.send({"weights": t}))
    r["parameter"] = attempt(lambda: sq.put(torch.nn.Parameter(t.clone())))
    r["storage"] = attempt(lambda: sq.put(t.untyped_storage()))
    r["state_dict"] = attempt(lambda: sq.put(torch.nn.Linear(2, 2).to("neuron").state_dict()))

    # A Queue pickles in its feeder thread: the receiver gets the error from get(),
    # and the queue goes on working.
    q, out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=receive, args=(q, out))
    p.start()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        q.put(t)
        q.put(torch.arange(3.0))
        r["queue_first"] = out.get(timeout=90)
        r["queue_second"] = out.get(timeout=90)
    r["sender_warned"] = any("cannot be shared" in str(w.message) for w in caught)
    p.join(timeout=60)
    r["receiver_exitcode"] = p.exitcode

    # CPU tensors keep torch's shared-memory semantics.
    cpu = torch.zeros(3).share_memory_()
    p = ctx.Process(target=add_one, args=(cpu,))
    p.start()
    p.join(timeout=90)
    r["shared_cpu"] = cpu.tolist()
    r["shared_exitcode"] = p.exitcode
    r["parent_still_works"] = (t + 1).tolist()
    print(json.dumps(r))
"""


def test_sending_neuron_tensors_is_refused_clearly(tmp_path, run_py, check):
    script = tmp_path / "send_neuron.py"
    script.write_text(SEND_SCRIPT)
    r = json.loads(check(run_py(str(script), timeout=240)).splitlines()[-1])
    for how in (
        "process_arg",
        "spawn_arg",
        "simple_queue",
        "pipe",
        "parameter",
        "storage",
        "state_dict",
    ):
        res = r[how]
        assert res is not None, f"{how}: sending a neuron tensor did not raise"
        assert res["error"] == "RuntimeError", (how, res)
        msg = res["message"]
        assert "neuron tensors cannot be shared between processes" in msg, (how, msg)
        assert "not supported" in msg and ".cpu()" in msg, (how, msg)

    first = r["queue_first"]
    assert first.get("error") == "RuntimeError", first
    assert "cannot be shared between processes" in first["message"]
    assert r["queue_second"] == {"got": "'Tensor'", "value": [0.0, 1.0, 2.0]}
    assert r["sender_warned"]
    assert r["receiver_exitcode"] == 0

    assert r["shared_cpu"] == [1.0, 1.0, 1.0]
    assert r["shared_exitcode"] == 0
    assert r["parent_still_works"] == [1.0, 2.0, 3.0, 4.0]
