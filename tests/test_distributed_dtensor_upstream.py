"""Upstream's DTensor test base (torch.testing._internal.distributed._tensor) picks
the accelerator's device type and default backend: on this machine `neuron` and the
`neuron` backend. A few of the kinds of test upstream writes on it, run as upstream
runs them (one spawned process per rank)."""

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.testing._internal.common_utils import run_tests
from torch.testing._internal.distributed._tensor.common_dtensor import (
    DTensorTestBase,
    with_comms,
)


class NeuronDTensorTest(DTensorTestBase):
    @property
    def world_size(self):
        return 2

    @property
    def backend(self):
        # init_pg accepts the accelerator's default backend only in the
        # "cpu:gloo,<device>:<backend>" form unless it is one of the backends it
        # lists by name (nccl, xccl, hccl, ...).
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


if __name__ == "__main__":
    run_tests()
