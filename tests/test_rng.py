"""Random numbers on neuron: per-device generators, their state, and the random ops
that draw from them (issue: RNG).

Each device's generator is the CPU's (mt19937) and its random ops draw on the host
when they are called, so values depend only on the seed and on the draws before,
never on timing, other streams or NEURON_LAUNCH_BLOCKING. The state is 16 bytes,
(seed, offset): the offset counts the 32-bit words drawn since seeding. Equality
with the CPU's numbers is tested in test_rng_cpu_equal.py.
"""

from __future__ import annotations

import math

import pytest
import torch

import torch_neuronx

D = "neuron"


def _state(device=D) -> tuple[int, int]:
    s = torch.neuron.get_rng_state(device)
    seed = int(s[:8].view(torch.int64).item()) & 0xFFFF_FFFF_FFFF_FFFF
    offset = int(s[8:].view(torch.int64).item())
    return seed, offset


# One entry per random op the issue names (and a few more): each returns a CPU copy.
RANDOM_OPS = {
    "rand": lambda g=None: torch.rand(64, device=D, generator=g),
    "randn": lambda g=None: torch.randn(64, device=D, generator=g),
    "randint": lambda g=None: torch.randint(0, 1000, (64,), device=D, generator=g),
    "randperm": lambda g=None: torch.randperm(64, device=D, generator=g),
    "normal_": lambda g=None: torch.empty(64, device=D).normal_(2.0, 3.0, generator=g),
    "uniform_": lambda g=None: torch.empty(64, device=D).uniform_(-1, 1, generator=g),
    "bernoulli_": lambda g=None: torch.empty(64, device=D).bernoulli_(0.5, generator=g),
    "exponential_": lambda g=None: torch.empty(64, device=D).exponential_(generator=g),
    "multinomial": lambda g=None: torch.multinomial(torch.ones(64, device=D), 16, generator=g),
    "normal": lambda g=None: torch.normal(torch.zeros(64, device=D), 1.0, generator=g),
    "random_": lambda g=None: torch.empty(64, device=D).random_(0, 100, generator=g),
    "geometric_": lambda g=None: torch.empty(64, device=D).geometric_(0.3, generator=g),
    "log_normal_": lambda g=None: torch.empty(64, device=D).log_normal_(generator=g),
    "cauchy_": lambda g=None: torch.empty(64, device=D).cauchy_(generator=g),
    "poisson": lambda g=None: torch.poisson(torch.full((64,), 4.0, device=D), generator=g),
}


def _draw(name: str, seed: int, gen: bool = False) -> torch.Tensor:
    if gen:
        g = torch.Generator(device=D).manual_seed(seed)
        return RANDOM_OPS[name](g).cpu()
    torch.neuron.manual_seed(seed)
    return RANDOM_OPS[name]().cpu()


@pytest.mark.parametrize("name", sorted(RANDOM_OPS))
def test_random_op_is_reproducible_per_seed_and_runs_on_the_device(name):
    torch_neuronx.clear_op_stats()
    a = _draw(name, 11)
    b = _draw(name, 11)
    c = _draw(name, 12)
    assert a.device.type == "cpu" and a.numel() > 0
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    # An explicit generator with the same seed replays the default generator.
    assert torch.equal(a, _draw(name, 11, gen=True))
    executed = torch_neuronx.get_executed_ops()
    assert executed, "nothing ran on the device"
    # The host draws the numbers (the CPU's), but the op is a device op, as
    # TorchNeuron reports random ops: executed, not a CPU fallback.
    assert torch_neuronx.get_fallback_ops() == []


def test_random_op_does_not_depend_on_the_cpu_generator():
    torch.manual_seed(0)
    torch.neuron.manual_seed(5)
    a = torch.randn(32, device=D).cpu()
    torch.manual_seed(1)  # reseeds neuron too (torch.manual_seed seeds every device)
    torch.neuron.manual_seed(5)
    torch.randn(32)  # CPU draws in between change nothing on neuron
    b = torch.randn(32, device=D).cpu()
    assert torch.equal(a, b)


def test_distributions_are_right():
    torch.neuron.manual_seed(0)
    n = 200_000
    u = torch.rand(n, device=D).cpu()
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    z = torch.randn(n, device=D).cpu()
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02
    z = torch.empty(n, device=D).normal_(2.0, 3.0).cpu()
    assert abs(z.mean() - 2) < 0.05 and abs(z.std() - 3) < 0.05
    b = torch.empty(n, device=D).bernoulli_(0.3).cpu()
    assert set(b.unique().tolist()) <= {0.0, 1.0} and abs(b.mean() - 0.3) < 0.01
    e = torch.empty(n, device=D).exponential_(2.0).cpu()
    assert e.min() >= 0 and abs(e.mean() - 0.5) < 0.01
    r = torch.randint(3, 9, (n,), device=D).cpu()
    assert r.min() == 3 and r.max() == 8
    p = torch.randperm(1000, device=D).cpu()
    assert torch.equal(p.sort().values, torch.arange(1000))
    m = torch.multinomial(torch.ones(4, 50, device=D), 50).cpu()
    assert all(torch.equal(row.sort().values, torch.arange(50)) for row in m)
    # multinomial follows the weights: index 1 has 3x the weight of index 0.
    w = torch.tensor([1.0, 3.0], device=D)
    draws = torch.multinomial(w, n, replacement=True).cpu()
    assert abs(draws.float().mean() - 0.75) < 0.01


def test_state_is_16_bytes_seed_then_offset_counting_words_drawn():
    torch.neuron.manual_seed(1234)
    s = torch.neuron.get_rng_state()
    assert s.dtype == torch.uint8 and s.shape == (16,) and s.device.type == "cpu"
    assert _state() == (1234, 0)
    torch.rand(3, device=D)  # float32 uniform: one 32-bit word per element
    assert _state() == (1234, 3)
    torch.rand(5, device=D, dtype=torch.float64)  # float64: two words each
    assert _state() == (1234, 13)
    torch.randn(1000, device=D)
    seed, offset = _state()
    assert seed == 1234 and offset > 13 + 1000


def test_set_rng_state_replays_values():
    torch.neuron.manual_seed(7)
    torch.rand(5, device=D)
    saved = torch.neuron.get_rng_state()
    a = torch.randn(100, device=D).cpu()
    torch.neuron.set_rng_state(saved)
    b = torch.randn(100, device=D).cpu()
    assert torch.equal(a, b)
    # The state is a copy: drawing more does not change it.
    assert torch.equal(saved, torch.neuron.get_rng_state()) is False
    torch.neuron.set_rng_state(saved)
    assert torch.equal(saved, torch.neuron.get_rng_state())


def test_devices_have_their_own_generators(two_devices):
    torch.neuron.manual_seed_all(3)
    a0 = torch.rand(8, device="neuron:0").cpu()
    a1 = torch.rand(8, device="neuron:1").cpu()
    assert torch.equal(a0, a1)  # same seed, same offset on each device
    with torch.neuron.device(1):
        torch.neuron.manual_seed(4)
        assert torch.neuron.initial_seed() == 4
    assert torch.neuron.initial_seed() == 3
    states = torch.neuron.get_rng_state_all()
    assert len(states) == torch.neuron.device_count()
    x0 = torch.rand(8, device="neuron:0").cpu()
    x1 = torch.rand(8, device="neuron:1").cpu()
    torch.neuron.set_rng_state_all(states)
    assert torch.equal(x0, torch.rand(8, device="neuron:0").cpu())
    assert torch.equal(x1, torch.rand(8, device="neuron:1").cpu())


def test_torch_manual_seed_seeds_every_neuron_device():
    torch.manual_seed(99)
    for i in range(torch.neuron.device_count()):
        assert _state(i) == (99, 0)
    assert torch.neuron.initial_seed() == 99


def test_seed_and_seed_all_pick_a_fresh_nondeterministic_seed():
    torch.neuron.manual_seed(0)
    torch.neuron.seed()
    s1 = torch.neuron.initial_seed()
    torch.neuron.seed()
    s2 = torch.neuron.initial_seed()
    assert s1 != s2
    torch.neuron.seed_all()
    seeds = {_state(i)[0] for i in range(torch.neuron.device_count())}
    assert len(seeds) == 1 and seeds != {0}


def test_fork_rng_restores_the_neuron_state():
    torch.neuron.manual_seed(5)
    before = torch.neuron.get_rng_state()
    devices = range(torch.neuron.device_count())
    with torch.random.fork_rng(devices=devices, device_type="neuron"):
        torch.neuron.manual_seed(77)
        torch.randn(10, device=D)
    assert torch.equal(torch.neuron.get_rng_state(), before)
    # The default device_type is cuda; naming neuron is what forks it.
    with torch.random.fork_rng(devices=[0], device_type="neuron"):
        torch.rand(4, device=D)
    assert torch.equal(torch.neuron.get_rng_state(), before)


def test_generator_object_on_neuron():
    g = torch.Generator(device="neuron")
    assert g.device == torch.device("neuron:0")
    g.manual_seed(21)
    assert g.initial_seed() == 21
    state = g.get_state()
    assert state.shape == (16,) and state.dtype == torch.uint8
    a = torch.randn(16, device=D, generator=g).cpu()
    g.set_state(state)
    b = torch.randn(16, device=D, generator=g).cpu()
    assert torch.equal(a, b)
    # It does not touch the default generator.
    torch.neuron.manual_seed(0)
    before = torch.neuron.get_rng_state()
    torch.rand(4, device=D, generator=g)
    assert torch.equal(before, torch.neuron.get_rng_state())
    g1 = torch.Generator(device="neuron:1") if torch.neuron.device_count() > 1 else None
    if g1 is not None:
        assert g1.device == torch.device("neuron:1")


def test_generator_offset_api():
    g = torch.Generator(device="neuron").manual_seed(1)
    whole = torch.rand(64, device=D, generator=g).cpu()
    assert g.get_offset() == 64
    # An offset is a position in the seed's stream: drawing at offset k gives
    # the numbers from the k-th word on (DTensor draws a shard this way).
    for k in (40, 3, 0):
        g.set_offset(k)
        assert g.get_offset() == k
        assert torch.equal(torch.rand(64 - k, device=D, generator=g).cpu(), whole[k:])


def test_cpu_generator_for_a_neuron_op_is_rejected_like_cuda():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(RuntimeError, match="Expected a 'neuron' device type for generator"):
        torch.randn(3, device=D, generator=g)
    with pytest.raises(RuntimeError, match="Expected a 'neuron' device type for generator"):
        torch.empty(3, device=D).uniform_(generator=g)
    assert torch.randn(3, device=D).cpu().shape == (3,)  # still usable


@pytest.mark.parametrize(
    "bad, exc, match",
    [
        (torch.zeros(15, dtype=torch.uint8), ValueError, "16 bytes"),
        (torch.zeros(16, dtype=torch.float32), TypeError, "uint8"),
        ([0] * 16, TypeError, "uint8"),
    ],
)
def test_bad_rng_state_is_a_clear_error(bad, exc, match):
    torch.neuron.manual_seed(3)
    before = torch.neuron.get_rng_state()
    with pytest.raises(exc, match=match):
        torch.neuron.set_rng_state(bad)
    assert torch.equal(before, torch.neuron.get_rng_state())  # nothing changed


def test_negative_offset_is_rejected():
    before = torch.neuron.get_rng_state()
    state = before.clone()
    state[8:].view(torch.int64).fill_(-8)
    with pytest.raises(RuntimeError, match="offset -8 is negative"):
        torch.neuron.set_rng_state(state)
    assert torch.equal(torch.neuron.get_rng_state(), before)
    g = torch.Generator(device="neuron")
    with pytest.raises(RuntimeError, match="16 bytes"):
        g.set_state(torch.zeros(8, dtype=torch.uint8))


def test_dropout_draws_from_the_neuron_generator():
    x = torch.ones(4096, device=D)
    torch.neuron.manual_seed(8)
    a = torch.nn.functional.dropout(x, 0.25).cpu()
    torch.manual_seed(123)  # the CPU generator plays no part
    torch.neuron.manual_seed(8)
    b = torch.nn.functional.dropout(x, 0.25).cpu()
    assert torch.equal(a, b)
    assert set(a.unique().tolist()) == {0.0, torch.tensor(1 / 0.75).item()}
    assert abs((a == 0).float().mean().item() - 0.25) < 0.03


def test_native_dropout_semantics_match_cuda():
    x = torch.randn(64, 32, device=D)
    out, mask = torch.native_dropout(x, 0.5, True)
    assert mask.dtype == torch.bool and mask.shape == x.shape and out.device == x.device
    expected = x.cpu() * mask.cpu() * 2.0
    torch.testing.assert_close(out.cpu(), expected)
    out, mask = torch.native_dropout(x, 0.5, False)
    assert torch.equal(out.cpu(), x.cpu()) and bool(mask.all())
    out, mask = torch.native_dropout(x, 1.0, True)
    assert not bool(out.cpu().any()) and not bool(mask.any())
    out, mask = torch.native_dropout(x, 0.0, True)
    assert torch.equal(out.cpu(), x.cpu()) and bool(mask.all())
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        torch.native_dropout(x, 1.5, True)
    empty = torch.empty(0, 3, device=D)
    out, mask = torch.native_dropout(empty, 0.5, True)
    assert out.shape == (0, 3) and mask.dtype == torch.bool


def test_dropout_backward_uses_the_forward_mask():
    torch.neuron.manual_seed(2)
    x = torch.randn(256, device=D, requires_grad=True)
    y = torch.nn.functional.dropout(x, 0.4, training=True)
    y.sum().backward()
    kept = (y.detach().cpu() != 0) | (x.detach().cpu() == 0)
    grad = x.grad.cpu()
    torch.testing.assert_close(grad, kept.float() / 0.6)
    # Half precision too.
    xh = torch.randn(256, device=D, dtype=torch.bfloat16)
    yh = torch.nn.functional.dropout(xh, 0.5)
    assert yh.dtype == torch.bfloat16


def test_dropout_module_in_eval_is_identity():
    m = torch.nn.Dropout(0.9).to(D).eval()
    x = torch.randn(10, device=D)
    assert torch.equal(m(x).cpu(), x.cpu())


_SAME_VALUES_SRC = """
import torch, sys
{busy}
torch.neuron.manual_seed(17)
side = torch.neuron.Stream()
with torch.neuron.stream(side):
    busy(4)  # other streams busy or not changes nothing
vals = [torch.randn(50, device="neuron"), torch.rand(50, device="neuron"),
        torch.nn.functional.dropout(torch.ones(50, device="neuron"), 0.5),
        torch.randperm(50, device="neuron").float(),
        torch.multinomial(torch.ones(50, device="neuron"), 10).float()]
torch.save([v.cpu() for v in vals], sys.argv[1] if len(sys.argv) > 1 else "/dev/null")
print(sum(float(v.sum().cpu()) for v in vals))
"""


def test_same_values_with_and_without_launch_blocking(run_py_many, check, busy_src):
    src = _SAME_VALUES_SRC.format(busy=busy_src)
    envs = ({}, {"NEURON_LAUNCH_BLOCKING": "1"}, {"NEURON_RT_VISIBLE_CORES": "1"})
    outs = [check(r).strip() for r in run_py_many([(src, env) for env in envs])]
    assert outs[0] == outs[1] == outs[2]
    assert math.isfinite(float(outs[0]))
