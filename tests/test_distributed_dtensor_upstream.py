"""Upstream's DTensor test base (torch.testing._internal.distributed._tensor) picks
the accelerator's device type and default backend: on this machine `neuron` and the
`neuron` backend. A few of the kinds of test upstream writes on it, run as upstream
runs them (one spawned process per rank), and in one process under LocalTensorMode
(upstream's ``create_local_tensor_test_class``, on the fake process group)."""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module
from torch.testing._internal.common_utils import run_tests
from torch.testing._internal.distributed._tensor.common_dtensor import (
    DTensorTestBase,
    create_local_tensor_test_class,
    with_comms,
)


class NeuronDTensorTest(DTensorTestBase):
    @property
    def world_size(self):
        return 2

    @property
    def backend(self):
        # The explicit form ("cpu:gloo,<device>:<backend>"), which init_pg accepts as
        # is: it sets no device, so DeviceMesh picks the rank's device itself.
        return (
            f"cpu:gloo,{self.device_type}:{dist.get_default_backend_for_device(self.device_type)}"
        )

    def test_base_uses_neuron(self):
        assert self.device_type == "neuron", self.device_type
        assert dist.get_default_backend_for_device(self.device_type) == "neuron"

    @with_comms
    def test_redistribute_shard_replicate_partial(self):
        mesh = self.build_device_mesh()
        torch.manual_seed(0)
        full = torch.randn(8, 6, device=self.device_type)
        dt = distribute_tensor(full, mesh, [Shard(0)])
        self.assertEqual(dt.to_local().shape, (4, 6))
        self.assertEqual(dt.redistribute(mesh, [Replicate()]).to_local(), full)
        partial = DTensor.from_local(torch.ones(3, device=self.device_type), mesh, [Partial()])
        self.assertEqual(
            partial.full_tensor(), torch.full((3,), float(self.world_size), device=self.device_type)
        )

    @with_comms
    def test_sharded_matmul_matches_local(self):
        mesh = self.build_device_mesh()
        torch.manual_seed(1)
        a = torch.randn(8, 4, device=self.device_type)
        b = torch.randn(4, 5, device=self.device_type)
        da = distribute_tensor(a, mesh, [Shard(0)])
        db = distribute_tensor(b, mesh, [Replicate()])
        self.assertEqual((da @ db).full_tensor(), a @ b)

    @with_comms
    def test_set_device_is_what_sharding_propagation_sees(self):
        # Sharding propagation runs each op on fake tensors made for index-less
        # "neuron" (the mesh's device type). FakeTensorMode puts them on the current
        # device only if the device module says it is initialized, else on neuron:0:
        # set_device must start the runtime (as torch.cuda.set_device does), or rank
        # 1's ops mix neuron:0 and neuron:1.
        torch.neuron.set_device(self.rank)
        self.assertTrue(torch.neuron.is_initialized())
        with FakeTensorMode():
            fake = torch.empty(2, device=self.device_type)
        self.assertEqual(fake.device, torch.device("neuron", self.rank))
        mesh = self.build_device_mesh()
        with torch.device("meta"):
            layer = nn.Linear(5, 8)
        layer = parallelize_module(layer, mesh, ColwiseParallel())
        layer.to_empty(device=self.device_type)
        with torch.no_grad():
            layer.weight.fill_(0.5)
            layer.bias.fill_(1.0)
        # Colwise: each rank's output columns, as a local tensor.
        out = layer(torch.ones(3, 5, device=self.device_type))
        self.assertEqual(out.device, torch.device("neuron", self.rank))
        self.assertEqual(out, torch.full((3, 8 // self.world_size), 3.5, device=self.device_type))


NeuronDTensorTestWithLocalTensor = create_local_tensor_test_class(
    NeuronDTensorTest,
    skipped_tests=[
        # The rank is a LocalIntNode, not a device index.
        "test_set_device_is_what_sharding_propagation_sees",
    ],
)


class NeuronDTensorDefaultBackendTest(DTensorTestBase):
    """The base's own backend choice: the accelerator's default backend by name
    (``neuron``), as upstream's test files (test_dtensor.py, ...) run it."""

    @property
    def world_size(self):
        return 2

    @with_comms
    def test_default_backend_serves_neuron_and_cpu_tensors_on_the_rank_device(self):
        self.assertEqual(self.backend, "neuron")
        self.assertEqual(torch.accelerator.current_device_index(), self.rank)
        on_device = torch.full((2,), float(self.rank + 1), device=self.device_type)
        dist.all_reduce(on_device)
        self.assertEqual(on_device.device, torch.device("neuron", self.rank))
        self.assertEqual(on_device.cpu(), torch.full((2,), 3.0))
        # Upstream's tests make CPU tensors too (DTensor.from_local moves them).
        on_cpu = torch.full((2,), float(self.rank + 1))
        dist.all_reduce(on_cpu)
        self.assertEqual(on_cpu, torch.full((2,), 3.0))
        mesh = self.build_device_mesh()
        dt = DTensor.from_local(torch.ones(2, 3), mesh, [Shard(0)])
        self.assertEqual(dt.full_tensor(), torch.ones(4, 3, device=self.device_type))


if __name__ == "__main__":
    run_tests()
