"""Sub-groups made by splitting: ``dist.split_group`` and a 2-d DeviceMesh after
``init_process_group(device_id=...)``.

With a bound device (eager initialisation) DeviceMesh creates each dimension's
sub-groups with ``dist.split_group``, which calls the parent backend's
``split`` (``Backend::supportsSplitting()``). Run on one host and with the ranks on
two "hosts" (TORCH_NEURONX_HOST_ID), where a split must carry the host layout: a
sub-group within one host moves data through shared memory, one across hosts
through gloo.
"""

from datetime import timedelta

import torch
import torch.distributed as dist
from common import dev, expect, expect_close, finish, rank, setup, world
from torch.distributed.device_mesh import init_device_mesh

setup(bind_device=True)


def transport(group) -> str:
    return group._get_backend(dev).transport


# One sub-group of every rank, and one of the even ranks.
sub = dist.split_group(split_ranks=[list(range(world))])
t = torch.full((4,), float(rank), device=dev)
dist.all_reduce(t, group=sub)
expect_close("split_group all_reduce", t, torch.full((4,), float(sum(range(world)))))
expect("split keeps the parent's transport", transport(sub) == transport(dist.group.WORLD))
# The child's options come from the parent's (getBackendOptions: torch 2.14's
# splitGroup asks for them on every split) with the caller's timeout.
timed = dist.split_group(split_ranks=[list(range(world))], timeout=timedelta(seconds=123))
opts = timed._get_backend(dev).options
expect(
    "split_group's timeout reaches the child",
    opts._timeout == timedelta(seconds=123),
    opts._timeout,
)
expect("the child's options are neuron's", opts.backend == "neuron", opts.backend)
t = torch.ones(2, device=dev)
dist.all_reduce(t, group=timed)
expect_close("the timed group's all_reduce", t, torch.full((2,), float(world)))
evens = list(range(0, world, 2))
part = dist.split_group(split_ranks=[evens])
if rank in evens:
    t = torch.full((3,), float(rank + 1), device=dev)
    dist.all_reduce(t, group=part)
    expect_close("even ranks' all_reduce", t, torch.full((3,), float(sum(r + 1 for r in evens))))
    b = torch.arange(5.0, device=dev) * (rank + 1)
    dist.broadcast(b, src=evens[-1], group=part)
    expect_close("even ranks' broadcast", b, torch.arange(5.0) * (evens[-1] + 1))
else:
    # torch 2.13 returns None to a rank outside the new group, 2.14 returns
    # GroupMember.NON_GROUP_MEMBER (as new_group always has).
    expect("not a member", part in (None, dist.GroupMember.NON_GROUP_MEMBER), part)

# A 2-d mesh (split on both dimensions); its rows are the ranks of a "host"
# when the job runs as two hosts of world // 2 ranks.
mesh = init_device_mesh("neuron", (2, world // 2), mesh_dim_names=("dp", "tp"))
expect("2-d mesh with a bound device", mesh["tp"].size() == world // 2)
for dim in ("dp", "tp"):
    group = mesh.get_group(dim)
    t = torch.full((2,), float(rank), device=dev)
    dist.all_reduce(t, group=group)
    members = dist.get_process_group_ranks(group)
    expect_close(f"mesh {dim} all_reduce", t, torch.full((2,), float(sum(members))))
    g = [torch.empty(2, device=dev) for _ in members]
    dist.all_gather(g, torch.full((2,), float(rank), device=dev), group=group)
    expect_close(
        f"mesh {dim} all_gather", torch.stack(g)[:, 0], torch.tensor(members, dtype=torch.float)
    )
print(
    "TRANSPORTS",
    transport(dist.group.WORLD),
    transport(mesh.get_group("dp")),
    transport(mesh.get_group("tp")),
    flush=True,
)
finish()
