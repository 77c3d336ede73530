"""Upstream's older module and criterion tests (``common_nn.module_tests``,
``get_new_module_tests()``, ``criterion_tests``: what PyTorch's test_nn.py builds its
per-module tests from) on neuron against the CPU, in float64 as upstream runs them:
outputs, parameter and input gradients.

Not compared: modules that draw random numbers in the forward (RReLU in training:
neuron's generator gives other numbers than the CPU's, as CUDA's does) and sparse
gradients (sparse layouts are not supported on neuron, docs/device.md)."""

from __future__ import annotations

import copy

import pytest
import torch
from test_modules_differential import to_device
from torch.testing._internal import common_nn
from torch.utils._pytree import tree_leaves

DEV = "neuron"
TOL = {"atol": 1e-6, "rtol": 1e-6, "equal_nan": True}
NOT_COMPARED = {
    "RReLU_": "random (the device's generator)",
    "RReLU_with_up_down": "random (the device's generator)",
    "RReLU_no_batch_dim": "random (the device's generator)",
    "Embedding_sparse": "sparse gradient",
    "EmbeddingBag_sparse": "sparse gradient",
}


def _name(t: dict) -> str:
    return t.get("fullname") or t.get("module_name", "?") + "_" + t.get("desc", "")


TESTS = [
    t
    for t in (
        list(common_nn.module_tests)
        + list(common_nn.get_new_module_tests())
        + list(common_nn.criterion_tests)
    )
    if ("input_fn" in t or "input_size" in t) and _name(t) not in NOT_COMPARED
]


def _build(t: dict):
    """(module, inputs) on the CPU in float64; the first floating input requires grad."""
    ctor = t.get("constructor") or getattr(torch.nn, t["module_name"])
    if "constructor_args_fn" in t:
        args = t["constructor_args_fn"]()
    else:
        args = t.get("constructor_args", ())
    module = ctor(*args).double()
    x = t["input_fn"]() if "input_fn" in t else torch.randn(t["input_size"])
    inputs = [x] if isinstance(x, torch.Tensor) else list(x)
    if "target_fn" in t:
        inputs.append(t["target_fn"]())
    elif "target_size" in t:
        inputs.append(torch.randn(t["target_size"]))
    inputs = [
        i.double().requires_grad_(k == 0 and not i.is_complex())
        if isinstance(i, torch.Tensor) and i.is_floating_point()
        else i
        for k, i in enumerate(inputs)
    ]
    return module, inputs


@pytest.mark.parametrize("t", TESTS, ids=[_name(t) for t in TESTS])
def test_matches_the_cpu(t):
    torch.manual_seed(0)
    module, inputs = _build(t)
    dev_module, dev_inputs = copy.deepcopy(module).to(DEV), to_device(inputs, DEV)
    torch.manual_seed(1)
    try:
        expected = [o for o in tree_leaves(module(*inputs)) if isinstance(o, torch.Tensor)]
    except Exception as e:  # noqa: BLE001 - entries this torch's CPU rejects are not compared
        pytest.skip(f"the CPU rejects it: {type(e).__name__}")
    torch.manual_seed(1)
    actual = [o for o in tree_leaves(dev_module(*dev_inputs)) if isinstance(o, torch.Tensor)]
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert a.device.type == DEV and a.shape == e.shape and a.dtype == e.dtype
        assert torch.allclose(a.detach().cpu(), e.detach(), **TOL), (a, e)
    grads = [o for o in expected if o.requires_grad and not o.is_complex()]
    if not grads:
        return
    sum(o.sum() for o in grads).backward()
    sum(o.sum() for o in actual if o.requires_grad and not o.is_complex()).backward()
    for (name, p), q in zip(module.named_parameters(), dev_module.parameters(), strict=True):
        if p.grad is not None:
            assert q.grad is not None and torch.allclose(q.grad.cpu(), p.grad, **TOL), name
    for e, a in zip(inputs, dev_inputs, strict=True):
        if isinstance(e, torch.Tensor) and e.grad is not None:
            assert torch.allclose(a.grad.cpu(), e.grad, **TOL)
