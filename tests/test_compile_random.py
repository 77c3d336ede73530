"""Random ops under ``torch.compile(backend="neuron")`` draw the numbers eager mode draws.

Same seed, same code: compiled and eager agree on the device the inputs come from
(neuron tensors: the neuron generator; CPU tensors, whose graph runs on neuron: the
CPU generator), forward and backward, and the generator ends in the same state, so
the next eager op draws the same numbers too.
"""

import pytest
import torch
import torch.nn.functional as F

DEVICES = ["neuron", "cpu"]


@pytest.fixture(autouse=True)
def _reset():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def seed(device, value):
    # As users write it: torch.manual_seed seeds every generator; on neuron also
    # the device module's own call.
    torch.manual_seed(value)
    if device == "neuron":
        torch.neuron.manual_seed(value)


def eager_and_compiled(fn, device, *args):
    """(eager result, next eager draw), twice: eagerly, then compiled."""
    results = []
    for run in (fn, torch.compile(fn, backend="neuron")):
        seed(device, 11)
        out = run(*args)
        after = torch.rand(5, device=device)
        results.append((out, after))
    return results


@pytest.mark.parametrize("device", DEVICES)
def test_random_factories_and_fills(device):
    def fn(x):
        a = torch.rand(3, 4, device=x.device) + torch.randn(3, 4, device=x.device)
        b = torch.randint(0, 100, (3, 4), device=x.device) + torch.randperm(4, device=x.device)
        c = torch.rand_like(x) * torch.bernoulli(torch.full_like(x, 0.3))
        d = torch.empty_like(x).uniform_(-1, 1) + torch.empty_like(x).normal_()
        return a + b + c + d + x

    x = torch.randn(3, 4, device=device)
    (eager, eager_next), (compiled, compiled_next) = eager_and_compiled(fn, device, x)
    assert compiled.device.type == "neuron"
    torch.testing.assert_close(compiled.cpu(), eager.cpu())
    assert torch.equal(compiled_next.cpu(), eager_next.cpu())


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_mask_forward_and_backward(device):
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Dropout(0.4)).to(device)
    x = torch.randn(8, 16, device=device)
    grads = []
    outs = []
    for run in (model, torch.compile(model, backend="neuron")):
        model.zero_grad()
        seed(device, 5)
        out = run(x)
        out.square().sum().backward()
        outs.append(out.detach().cpu())
        grads.append(model[0].weight.grad.clone())
    assert torch.equal(outs[0] == 0, outs[1] == 0)  # the same mask
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-6)
    assert grads[1].device == model[0].weight.device
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_sdpa_with_dropout(device):
    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.3, is_causal=True)

    q, k, v = (torch.randn(2, 2, 8, 16, device=device) for _ in range(3))
    (eager, eager_next), (compiled, compiled_next) = eager_and_compiled(fn, device, q, k, v)
    torch.testing.assert_close(compiled.cpu(), eager.cpu(), rtol=1e-5, atol=1e-5)
    assert torch.equal(compiled_next.cpu(), eager_next.cpu())


def test_generator_state_after_a_compiled_call_is_the_eager_state():
    def fn(x):
        return F.dropout(x, 0.5) + torch.randn_like(x)

    x = torch.ones(32, device="neuron")
    states = []
    for run in (fn, torch.compile(fn, backend="neuron")):
        torch.neuron.manual_seed(3)
        run(x)
        states.append(torch.neuron.get_rng_state())
    assert torch.equal(states[0], states[1])


def test_reduce_overhead_with_random_ops_matches_eager():
    def fn(x):
        return F.dropout(x, 0.5, training=True) + 1

    f = torch.compile(fn, backend="neuron", mode="reduce-overhead")
    x = torch.ones(64, device="neuron")
    for step in range(3):
        torch.manual_seed(step)
        eager = fn(x).cpu()
        torch.manual_seed(step)
        assert torch.equal(f(x).cpu(), eager)


@pytest.mark.parametrize("backend", ["neuron", "aot_eager"])
def test_activation_checkpointing_under_compile_replays_the_forward_draws(backend):
    # AOTAutograd saves the device's RNG state around the recomputed random ops
    # (run_and_save_rng_state / run_with_rng_state): upstream knows only built-in
    # devices ("Backend not supported for neuron"); compile/rng_state_ops.py adds
    # neuron. The recomputed dropout draws the forward's mask: gradients, and the
    # generator's state afterwards, are the CPU's eager ones.
    from torch.utils.checkpoint import checkpoint

    def run(device, compiled):
        torch.manual_seed(0)
        lin = torch.nn.Linear(32, 32, device=device)
        x = torch.randn(16, 32, device=device, requires_grad=True)

        def block(t):
            return F.dropout(lin(t).relu(), 0.5, training=True) + torch.randn_like(t)

        def f(t):
            return checkpoint(block, t, use_reentrant=False).square().sum()

        g = torch.compile(f, backend=backend, fullgraph=True) if compiled else f
        y = g(x)
        y.backward()
        return y.detach().cpu(), x.grad.cpu(), lin.weight.grad.cpu(), torch.rand(3, device=device)

    y, gx, gw, after = run("neuron", True)
    y_cpu, gx_cpu, gw_cpu, after_cpu = run("cpu", False)
    torch.testing.assert_close(y, y_cpu)
    torch.testing.assert_close(gx, gx_cpu)
    torch.testing.assert_close(gw, gw_cpu)
    assert torch.equal((gx == 0), (gx_cpu == 0))
    assert torch.equal(after.cpu(), after_cpu)
