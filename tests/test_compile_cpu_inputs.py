"""``torch.compile(backend="neuron")`` on CPU tensors runs on neuron (TorchNeuron's CPU autocopy).

Written the way TorchNeuron's own tests call it: CPU tensors in, neuron tensors out,
``TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY=1`` (with fallback execution disabled)
raises ``Input tensor at index 0 is on cpu device``. Results are compared with the
same code run eagerly on the CPU.
"""

import warnings

import pytest
import torch
from device_trace import trace_labels

DEV = "neuron"


@pytest.fixture(autouse=True)
def _reset():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_cpu_tensors_in_neuron_tensors_out():
    @torch.compile(backend="neuron")
    def fn(x):
        return x * 2

    x_cpu = torch.randn(10, device="cpu")
    y = fn(x_cpu)
    assert y.device.type == "neuron" and y.shape == (10,)
    torch.testing.assert_close(y.cpu(), x_cpu * 2)


def test_the_graph_runs_on_the_device_as_one_program():
    def fn(x, w):
        return (x @ w).relu() + torch.ones(x.shape[0], w.shape[1])

    x, w = torch.randn(4, 8), torch.randn(8, 3)
    out = torch.compile(fn, backend="neuron")(x, w)
    torch.testing.assert_close(out.cpu(), fn(x, w))
    cf = torch.compile(fn, backend="neuron")
    labels = trace_labels(lambda: cf(x, w))
    programs = [label for label in labels if label.startswith("compiled graph")]
    assert len(programs) == 1, labels
    # Only the copies of the two inputs run outside it.
    assert set(labels) - set(programs) == {"copy_host_to_device"}, labels


def test_tensors_created_on_the_cpu_are_created_on_neuron():
    def fn(x):
        # device=x.device is folded to "cpu" by Dynamo: it follows the graph too.
        r = torch.arange(x.shape[-1], device=x.device)
        return x + torch.zeros(x.shape, device="cpu") + r + torch.tensor(1.5)

    x = torch.randn(3, 5)
    out = torch.compile(fn, backend="neuron", fullgraph=True)(x)
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), fn(x))


def test_a_cpu_module_trains_on_neuron_and_its_gradients_stay_on_the_cpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    ref = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    ref.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="neuron")
    x = torch.randn(5, 6)
    out = compiled(x)
    assert out.device.type == "neuron"
    out.square().sum().backward()
    ref(x).square().sum().backward()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        assert p.device.type == "cpu" and p.grad.device.type == "cpu"
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)


def test_mutated_cpu_inputs_see_the_mutation():
    def fn(a, count, b):
        a.add_(b)
        count += 1  # a 0-dim CPU tensor
        b.mul_(2)
        return a.sum() * count

    a, count, b = torch.zeros(3), torch.tensor(0.0), torch.ones(3)
    out = torch.compile(fn, backend="neuron")(a, count, b)
    assert out.device.type == "neuron" and out.item() == 3.0
    assert a.tolist() == [1.0, 1.0, 1.0] and count.item() == 1.0 and b.tolist() == [2.0] * 3


def test_an_input_returned_as_it_is_is_the_callers_tensor():
    def fn(a, b):
        a.mul_(3)
        return a, b + 1

    a, b = torch.ones(2), torch.ones(2)
    out_a, out_b = torch.compile(fn, backend="neuron")(a, b)
    assert out_a is a and a.tolist() == [3.0, 3.0]  # eager returns `a` itself
    assert out_b.device.type == "neuron"


def test_scalar_cpu_tensors_and_python_numbers():
    def fn(x, scale, shift: float):
        return x * scale + shift

    x, scale = torch.randn(4), torch.tensor(3.0)
    out = torch.compile(fn, backend="neuron")(x, scale, 0.5)
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), fn(x, scale, 0.5))
    only_scalar = torch.compile(lambda s: s * 2 + 1, backend="neuron")(torch.tensor(2.0))
    assert only_scalar.device.type == "neuron" and only_scalar.item() == 5.0


def test_autocopy_disabled_raises_naming_the_input(monkeypatch):
    # Fallback execution is off by default.
    monkeypatch.setenv("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", "1")
    monkeypatch.delenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", raising=False)

    @torch.compile(backend="neuron")
    def fn(x):
        return x * 2

    with pytest.raises(RuntimeError, match=r"Input tensor at index 0 is on cpu device"):
        fn(torch.randn(10, device="cpu"))
    # Neuron tensors work normally.
    x = torch.randn(10, device="neuron")
    torch.testing.assert_close(fn(x).cpu(), x.cpu() * 2)


def test_autocopy_disabled_with_fallback_runs_eagerly_with_a_warning(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", "1")
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "0")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.compile(lambda x, y: x + y, backend="neuron")(torch.ones(2), torch.ones(2))
    assert out.device.type == "cpu" and out.tolist() == [2.0, 2.0]
    (msg,) = [str(w.message) for w in caught if "Input tensor at index 0" in str(w.message)]
    assert "runs eagerly" in msg
    assert "fallback execution is on: TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0" in msg


@pytest.mark.parametrize("env", ["0", "1"])
def test_autocopy_disabled_follows_the_fallback_option_over_the_variable(monkeypatch, env):
    monkeypatch.setenv("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", "1")
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", env)
    allowed = env == "1"  # the option says the opposite of the variable
    f = torch.compile(lambda x, y: x + y, backend="neuron", options={"fallback_execution": allowed})
    if allowed:
        with pytest.warns(UserWarning, match=r'options=\{"fallback_execution": True\}'):
            out = f(torch.ones(2), torch.ones(2))
        assert out.device.type == "cpu" and out.tolist() == [2.0, 2.0]
    else:
        with pytest.raises(RuntimeError, match=r"Input tensor at index 0 is on cpu device"):
            f(torch.ones(2), torch.ones(2))


def test_reduce_overhead_on_cpu_inputs():
    def fn(x):
        return (x * 2).sin() + 1

    f = torch.compile(fn, backend="neuron", mode="reduce-overhead")
    for i in range(4):
        x = torch.full((8,), float(i))
        out = f(x)
        assert out.device.type == "neuron"
        torch.testing.assert_close(out.cpu(), fn(x))


def test_retain_device_mode_returns_cpu_outputs(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_RETAIN_DEVICE_MODE", "1")

    def fn(x):
        x.add_(10)
        return x * 2, x.sum()

    x = torch.zeros(4)
    doubled, total = torch.compile(fn, backend="neuron")(x)
    assert doubled.device.type == "cpu" and total.device.type == "cpu"
    assert doubled.tolist() == [20.0] * 4 and total.item() == 40.0 and x.tolist() == [10.0] * 4
