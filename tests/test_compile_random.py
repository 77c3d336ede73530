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


# A sweep of training graphs that mix random ops with reductions and matmuls:
# forward and every input's gradient, compiled on neuron, against the CPU's eager
# run with the same seed (the CPU and neuron generators draw the same numbers).
# The dropout-after-softmax-before-matmul case returned NaN: Inductor scheduled
# the mask's readers before the mask was drawn (compile/bernoulli_fallback.py).
def _attention_dropout(q, k, v):
    a = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * 2**-0.5, dim=-1)
    return torch.matmul(F.dropout(a, p=0.5, training=True), v)


def _dropout_then_reduce(q, k, v):
    h = F.dropout(q @ k.transpose(-2, -1), p=0.3, training=True)
    return h.sum(-1, keepdim=True) * v + h.amax(-1, keepdim=True)


def _noise_into_norm(q, k, v):
    x = q + 0.1 * torch.randn_like(q) + torch.rand_like(k) * k
    x = F.layer_norm(x, x.shape[-1:])
    return torch.matmul(F.dropout(x, p=0.2, training=True), v.transpose(-2, -1)).mean(-1)


def _explicit_mask(q, k, v):
    mask = torch.empty_like(q).bernoulli_(0.6) / 0.6
    s = (q * mask) @ k.transpose(-2, -1)
    return torch.log_softmax(s, -1) @ v + torch.bernoulli(torch.full_like(v, 0.5)) * v


def _two_dropouts_and_a_residual(q, k, v):
    a = F.dropout(torch.softmax(q @ k.transpose(-2, -1), -1), p=0.1, training=True)
    o = a @ v
    return F.dropout(F.gelu(o), p=0.25, training=True) + q


@pytest.mark.parametrize(
    "fn",
    [
        _attention_dropout,
        _dropout_then_reduce,
        _noise_into_norm,
        _explicit_mask,
        _two_dropouts_and_a_residual,
    ],
    ids=lambda f: f.__name__.strip("_"),
)
@pytest.mark.parametrize("shape", [(2, 2, 2, 2), (2, 3, 8, 16)], ids=["tiny", "small"])
def test_compiled_training_with_random_ops_equals_cpu_eager(fn, shape):
    gen = torch.Generator().manual_seed(0)
    base = [torch.randn(*shape, generator=gen) for _ in range(3)]

    def run(device, compile_it):
        args = [t.detach().clone().to(device).requires_grad_() for t in base]
        f = torch.compile(fn, backend="neuron") if compile_it else fn
        seed(device, 42)
        out = f(*args)
        out.square().sum().backward()
        return out.detach().cpu(), [a.grad.cpu() for a in args]

    want, want_grads = run("cpu", compile_it=False)
    got, got_grads = run("neuron", compile_it=True)
    assert torch.isfinite(got).all(), "the compiled forward returned NaN or inf"
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)
