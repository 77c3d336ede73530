"""One rank of the profiling test job: collectives under torch.profiler with the
device activities, on the world group and on a sub-group.

Argument: a directory; each rank writes its chrome trace there as
``rank<r>.json`` and prints ``ITEMS <json>`` (the session's device items).
"""

import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

import torch_neuronx

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
torch.neuron.set_device(rank)
dev = torch.device("neuron", rank)
dist.init_process_group("neuron", timeout=timedelta(seconds=60))
# A sub-group of the odd ranks, listed backwards: its group ranks differ from the
# global ones, which the items' peers use.
sub = dist.new_group(sorted(range(1, world, 2), reverse=True))

x = torch.full((1024,), float(rank + 1), device=dev)
dist.all_reduce(x)  # the communicator's first use, outside the profile
torch.neuron.synchronize()

with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
    dist.all_reduce(x)
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    dist.broadcast(x, src=0)
    h = torch.zeros(256, device=dev, dtype=torch.bfloat16)
    if rank == 0:
        dist.send(h + 1, dst=1)
    elif rank == 1:
        dist.recv(h, src=0)
    gathered = torch.empty(world * 1024, device=dev)
    dist.all_gather_into_tensor(gathered, x)
    scattered = torch.empty(1024 // world, device=dev)
    dist.reduce_scatter_tensor(scattered, x)
    if rank < 2:  # ranks 0 and 1 swap a tensor
        peer = 1 - rank
        got = torch.empty(8, device=dev, dtype=torch.int64)
        ops = [
            dist.P2POp(dist.isend, torch.arange(8, device=dev), peer),
            dist.P2POp(dist.irecv, got, peer),
        ]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    if rank % 2 == 1:
        dist.all_reduce(x, group=sub)
    torch.neuron.synchronize()

# Summed twice (max and broadcast keep it), then summed over the sub-group.
want = world * (world + 1) // 2 * world * (len(range(1, world, 2)) if rank % 2 else 1)
assert x.cpu().eq(want).all(), (x[:4], want)
prof.export_chrome_trace(os.path.join(sys.argv[1], f"rank{rank}.json"))
print("ITEMS", json.dumps(torch_neuronx._C._profiler_items()), flush=True)
dist.barrier()
dist.destroy_process_group()
