"""One rank of a job that goes wrong; the mode (argv[1]) says how.

kill      the last rank SIGKILLs itself before the second all_reduce; the
          others must raise DistBackendError naming the collective and the rank.
mismatch  ranks all_reduce tensors of different sizes: every rank raises, and
          the group still works afterwards.
misuse    bad arguments are refused at the call, nothing is sent.
timeout   every rank lowers the group's timeout with set_timeout (torch 2.14's
          dist.set_timeout; on 2.13 ProcessGroup.set_timeout, which it calls), then
          the last rank arrives
          late at an all_reduce: the others raise within the new timeout, not
          the group's 20 s.
"""

import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

mode = sys.argv[1]
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
torch.neuron.set_device(rank)
dev = torch.device("neuron", rank)
dist.init_process_group("neuron", timeout=timedelta(seconds=20))

t = torch.ones(1000, device=dev)
dist.all_reduce(t)
assert t.cpu()[0].item() == world

if mode == "kill":
    if rank == world - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        dist.all_reduce(t)
        torch.neuron.synchronize()
    except dist.DistBackendError as e:
        msg = str(e)
        took = time.monotonic() - start
        assert "allreduce" in msg, msg
        assert str(world - 1) in msg, msg
        print(f"RAISED after {took:.1f}s: {msg.splitlines()[0][:300]}")
        sys.exit(0)
    print("NO ERROR")
    sys.exit(1)

if mode == "mismatch":
    bad = torch.ones(10 + rank, device=dev)
    try:
        dist.all_reduce(bad)
        torch.neuron.synchronize()
        print("NO ERROR")
        sys.exit(1)
    except dist.DistBackendError as e:
        print("RAISED:", str(e).splitlines()[0][:300])
    t = torch.ones(7, device=dev)
    dist.all_reduce(t)
    assert t.cpu().tolist() == [float(world)] * 7, t.cpu()
    print("USABLE")

if mode == "misuse":
    errors = {}
    for name, fn in {
        "cpu tensor": lambda: dist.all_reduce(torch.ones(2)),
        # The test gives every rank two cores: neuron:<rank> and neuron:<rank + 1>.
        "other device": lambda: dist.all_reduce(
            torch.ones(2, device=torch.device("neuron", rank + 1))
        ),
        "bool AVG": lambda: dist.all_reduce(
            torch.ones(2, dtype=torch.bool, device=dev), op=dist.ReduceOp.AVG
        ),
        "float BAND": lambda: dist.all_reduce(torch.ones(2, device=dev), op=dist.ReduceOp.BAND),
        "uneven all_to_all splits": lambda: dist.all_to_all_single(
            torch.empty(4, device=dev),
            torch.ones(4, device=dev),
            [1] * world,
            [5] + [0] * (world - 1),
        ),
        "all_gather_into_tensor size": lambda: dist.all_gather_into_tensor(
            torch.empty(3, device=dev), torch.ones(2, device=dev)
        ),
    }.items():
        try:
            fn()
            errors[name] = None
        except (RuntimeError, ValueError) as e:
            errors[name] = str(e).splitlines()[0]
    for name, msg in errors.items():
        print(f"{name}: {msg}")
    assert all(errors.values()), errors
    torch.neuron.synchronize()  # nothing was queued by the refused calls
    t = torch.ones(3, device=dev)
    dist.all_reduce(t)
    assert t.cpu().tolist() == [float(world)] * 3
    print("USABLE")

if mode == "timeout":
    set_timeout = getattr(dist, "set_timeout", None) or dist.group.WORLD.set_timeout
    set_timeout(timedelta(seconds=3))
    dist.all_reduce(t)  # still usable with the new bound
    torch.neuron.synchronize()
    if rank == world - 1:
        time.sleep(12)
        print("LATE")
        os._exit(0)  # the others have given up on this rank
    start = time.monotonic()
    try:
        dist.all_reduce(t)
        torch.neuron.synchronize()
    except dist.DistBackendError as e:
        print(f"RAISED after {time.monotonic() - start:.1f}s: {str(e).splitlines()[0][:300]}")
        os._exit(0)
    print("NO ERROR")
    sys.exit(1)

dist.destroy_process_group()
