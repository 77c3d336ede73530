"""Device RNG state inside fake and local tensor modes.

``torch.neuron.get_rng_state()`` / ``set_rng_state()`` are the default
generator's own get/set state: plain calls that build or read a CPU byte tensor
without dispatching an op, as CUDA's are. So they work under ``FakeTensorMode``
(tracing code with random ops) and ``LocalTensorMode`` (upstream's one-process
simulation of DTensor ranks), where ``torch.get_rng_state()`` works too.
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.testing._internal.common_utils import run_tests
from torch.testing._internal.distributed._tensor.common_dtensor import (
    DTensorTestBase,
    create_local_tensor_test_class,
    with_comms,
)

DEV = "neuron"


def test_default_generators_are_the_devices_generators():
    gens = torch.neuron.default_generators
    assert len(gens) == torch.neuron.device_count()
    assert all(isinstance(g, torch.Generator) and g.device.type == DEV for g in gens)
    assert torch.neuron.default_generators[0] is gens[0]  # the same objects each time
    torch.neuron.manual_seed(1234)
    assert gens[torch.neuron.current_device()].initial_seed() == 1234
    gens[0].manual_seed(7)
    torch.neuron.set_device(0)
    a = torch.rand(5, device=DEV)
    torch.neuron.manual_seed(7)
    assert torch.equal(a.cpu(), torch.rand(5, device=DEV).cpu())


def test_state_round_trips_through_the_generator():
    torch.neuron.manual_seed(3)
    torch.rand(4, device=DEV)
    state = torch.neuron.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    assert torch.equal(state, torch.neuron.default_generators[0].get_state())
    a = torch.randn(6, device=DEV)
    torch.neuron.set_rng_state(state)
    assert torch.equal(a.cpu(), torch.randn(6, device=DEV).cpu())
    # A strided view of the same bytes is read in logical order.
    wide = torch.stack([state, torch.zeros_like(state)], dim=1)
    torch.neuron.set_rng_state(wide[:, 0])
    assert torch.equal(a.cpu(), torch.randn(6, device=DEV).cpu())


def test_bad_states_change_nothing():
    torch.neuron.manual_seed(11)
    before = torch.neuron.get_rng_state()
    all_before = torch.neuron.get_rng_state_all()
    bad_offset = before.clone()
    bad_offset[8:].view(torch.int64).fill_(-3)  # a negative offset
    with pytest.raises(RuntimeError, match="offset -3 is negative"):
        torch.neuron.set_rng_state(bad_offset)
    with pytest.raises(ValueError, match="must have 16 bytes"):
        torch.neuron.set_rng_state(torch.zeros(8, dtype=torch.uint8))
    with pytest.raises(TypeError, match="uint8"):
        torch.neuron.set_rng_state(torch.zeros(16))
    n = torch.neuron.device_count()
    with pytest.raises(RuntimeError, match="offset -3"):
        torch.neuron.set_rng_state_all(
            [torch.zeros(16, dtype=torch.uint8)] * (n - 1) + [bad_offset]
        )
    assert torch.equal(torch.neuron.get_rng_state(), before)
    after = torch.neuron.get_rng_state_all()
    assert all(torch.equal(a, b) for a, b in zip(after, all_before, strict=True))


def test_state_under_fake_tensor_mode():
    torch.neuron.manual_seed(5)
    real = torch.neuron.get_rng_state()
    with FakeTensorMode():
        state = torch.neuron.get_rng_state()
        cpu_state = torch.get_rng_state()  # works there too, as the reference
        torch.neuron.set_rng_state(state)
        all_states = torch.neuron.get_rng_state_all()
        torch.neuron.set_rng_state_all(all_states)
        with torch.random.fork_rng(devices=[0], device_type=DEV):
            torch.neuron.manual_seed(9)
    assert type(state) is torch.Tensor and type(cpu_state) is torch.Tensor
    assert torch.equal(state, real)
    assert torch.equal(torch.neuron.get_rng_state(), real)  # fork_rng restored it


def test_tracing_random_ops_with_fake_tensors():
    # make_fx in fake mode runs the device module's RNG calls (torch.random.fork_rng
    # inside traced code, as DTensor's random-op tracker does).
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x):
        with torch.random.fork_rng(devices=[x.device.index or 0], device_type=DEV):
            torch.neuron.set_rng_state(torch.neuron.get_rng_state())
            return x + torch.rand_like(x)

    gm = make_fx(f, tracing_mode="fake")(torch.zeros(3, device=DEV))
    assert any("rand" in str(n.target) for n in gm.graph.nodes)


class NeuronDTensorRandomTest(DTensorTestBase):
    """DTensor random ops on neuron, written as upstream's DTensor tests are."""

    @property
    def world_size(self):
        return 2

    @property
    def backend(self):
        return "cpu:gloo,neuron:neuron"

    @with_comms
    def test_random_ops_on_sharded_dtensor(self):
        mesh = self.build_device_mesh()
        torch.manual_seed(0)
        dt = distribute_tensor(torch.zeros(8, 4, device=self.device_type), mesh, [Shard(0)])
        dt.uniform_(0, 1)
        full = dt.full_tensor()
        self.assertEqual(full.shape, (8, 4))
        # The shards draw different numbers (offsets advance per shard): each
        # its part of the CPU's draw for the whole tensor (the offset counts
        # the generator's words, one per float32 uniform).
        self.assertNotEqual(full[:4], full[4:])
        torch.manual_seed(0)
        self.assertEqual(full.cpu(), torch.zeros(8, 4).uniform_(0, 1), atol=0, rtol=0)
        self.assertTrue(bool(((full >= 0) & (full < 1)).all()))
        rep = distribute_tensor(torch.zeros(4, device=self.device_type), mesh, [Replicate()])
        rep.normal_()
        self.assertIsInstance(rep, DTensor)
        self.assertEqual(rep.full_tensor(), rep.to_local())

    @with_comms
    def test_sharded_ops_keep_the_device_state(self):
        # LocalTensorMode saves and restores the CPU and device RNG states
        # around every op it runs per rank (torch.neuron.get/set_rng_state).
        mesh = self.build_device_mesh()
        torch.manual_seed(2)
        a = torch.randn(8, 4, device=self.device_type)
        b = torch.randn(4, 6, device=self.device_type)
        da = distribute_tensor(a, mesh, [Shard(0)])
        db = distribute_tensor(b, mesh, [Replicate()])
        out = (da @ db).relu().redistribute(mesh, [Replicate()])
        self.assertEqual(out.to_local(), (a @ b).relu())
        self.assertEqual(out.sum().full_tensor(), (a @ b).relu().sum())

    @with_comms
    def test_dropout_on_dtensor(self):
        mesh = self.build_device_mesh()
        torch.manual_seed(1)
        x = distribute_tensor(torch.ones(8, 8, device=self.device_type), mesh, [Shard(0)])
        y = torch.nn.functional.dropout(x, p=0.5, training=True)
        vals = set(y.full_tensor().unique().tolist())
        self.assertTrue(vals <= {0.0, 2.0}, vals)


# One process simulating both ranks. Random ops on DTensors are left out there:
# upstream's LocalTensor RNG tracker takes its device index from
# torch.cuda.current_device() (torch/distributed/_local_tensor, _device), so it
# runs random ops on CUDA builds only.
NeuronDTensorRandomTestWithLocalTensor = create_local_tensor_test_class(
    NeuronDTensorRandomTest,
    skipped_tests=["test_random_ops_on_sharded_dtensor", "test_dropout_on_dtensor"],
)


if __name__ == "__main__":
    run_tests()
