"""One rank of a job written as TorchNeuron's examples write it: the device is
``neuron:<local_rank>``, ``set_device(local_rank)``, ``init_process_group`` with
``device_id``, a DeviceMesh over the ranks and a DTensor op. Each rank sees one
core (NEURON_RT_VISIBLE_CORES=<local_rank>, set by the test or by torch_neuronx
itself when a launcher's process has none). Prints ``OK`` at the end."""

import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
local_rank = int(os.environ["LOCAL_RANK"])
local_world = int(os.environ["LOCAL_WORLD_SIZE"])

# The launcher's core, and TorchNeuron's numbering of it.
assert os.environ["NEURON_RT_VISIBLE_CORES"] == str(local_rank), os.environ
assert torch.neuron.current_device() == local_rank, torch.neuron.current_device()
assert torch.neuron.device_count() == local_world, torch.neuron.device_count()
props = torch.neuron.get_device_properties(local_rank)
assert props.logical_core == local_rank, props

device = torch.device(f"neuron:{local_rank}")
torch.neuron.set_device(local_rank)
dist.init_process_group("neuron", device_id=device)
torch.manual_seed(0)  # seeds every device's generator, as on CUDA

# A device of another rank is refused with the range this process has.
other = (local_rank + 1) % local_world
try:
    torch.ones(1, device=f"neuron:{other}")
    raise AssertionError(f"neuron:{other} was accepted on local rank {local_rank}")
except IndexError as e:
    want = f"Valid range is {local_rank} to {local_rank} for this process"
    assert want in str(e), str(e)

t = torch.full((5,), float(rank + 1), device=device)
dist.all_reduce(t)
assert t.device == device, t.device
assert t.cpu().tolist() == [world * (world + 1) / 2] * 5, t.cpu()

# DeviceMesh over the ranks, as the vendor's DTensor examples build it.
mesh = DeviceMesh("neuron", list(range(world)))
assert mesh.device_type == "neuron"
full = torch.arange(world * 4 * 3, dtype=torch.float32).reshape(world * 4, 3)
weight = torch.linspace(-1, 1, 6).reshape(3, 2)
x = distribute_tensor(full.to(device), mesh, [Shard(0)])
assert x.to_local().device == device, x.to_local().device
y = x @ distribute_tensor(weight.to(device), mesh, [Replicate()])
torch.testing.assert_close(y.full_tensor().cpu(), full @ weight)
z = x.redistribute(mesh, [Replicate()]).to_local()
torch.testing.assert_close(z.cpu(), full)
r = distribute_tensor(torch.zeros(world * 2, device=device), mesh, [Shard(0)])
r.uniform_()  # DTensor's RNG tracker picks the rank's device (rank % device_count)
assert r.to_local().device == device

mesh2 = init_device_mesh("neuron", (world,))
s = distribute_tensor(full.to(device), mesh2, [Shard(1)]).sum()
torch.testing.assert_close(s.full_tensor().cpu(), full.sum())

dist.barrier()
dist.destroy_process_group()
print("OK", flush=True)
