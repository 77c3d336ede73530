"""torch.compile(backend="neuron") is registered and gives eager mode's results.

Graphs run op by op for now (see torch_neuronx/dynamo_backend.py); what is tested
is the contract libraries rely on: the backend exists under the device's name,
forward and backward match eager, and mutations reach the caller.
"""

import pytest
import torch

DEV = "neuron"


def test_backend_is_listed():
    assert "neuron" in torch._dynamo.list_backends()


@pytest.fixture(autouse=True)
def _reset():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_forward_and_backward_match_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    model = model.to(DEV)
    compiled = torch.compile(model, backend="neuron")
    x = torch.randn(3, 8, device=DEV)
    out = compiled(x)
    out.square().sum().backward()
    grads = [p.grad.cpu().clone() for p in model.parameters()]
    model.zero_grad()
    expected = model(x)
    expected.square().sum().backward()
    torch.testing.assert_close(out.cpu(), expected.cpu())
    for g, p in zip(grads, model.parameters(), strict=True):
        torch.testing.assert_close(g, p.grad.cpu())
    assert out.device.type == DEV


def test_input_mutation_reaches_caller():
    def f(x):
        x.add_(1)
        return x * 2

    x = torch.zeros(4, device=DEV)
    y = torch.compile(f, backend="neuron")(x)
    assert torch.equal(x.cpu(), torch.ones(4))
    assert torch.equal(y.cpu(), torch.full((4,), 2.0))
