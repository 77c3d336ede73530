"""Every module of upstream's ModuleInfo database (``common_modules.module_db``, what
PyTorch's test_modules.py runs on each device) on neuron against the CPU: each of its
constructor/forward inputs, in training and eval mode, forward outputs, parameter and
input gradients, in float32.

Lazy modules initialise their parameters at the first call, from the device's
generator (neuron's numbers differ from the CPU's, as CUDA's do): they are initialised
by a CPU call and then copied, so both devices start from the same weights."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.nn.modules.lazy import LazyModuleMixin
from torch.testing._internal.common_modules import module_db
from torch.utils._pytree import tree_leaves, tree_map

DEV = "neuron"
TOL = {"atol": 1e-4, "rtol": 1e-4}


def to_device(obj, device):
    return tree_map(
        lambda t: (
            t.detach().to(device).requires_grad_(t.requires_grad)
            if isinstance(t, torch.Tensor)
            else t
        ),
        obj,
    )


def tensors(obj) -> list[torch.Tensor]:
    return [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor)]


def backward_of(outputs: list[torch.Tensor]) -> None:
    # Each differentiable output weighted differently, so every output's gradient counts.
    grads = [o for o in outputs if o.requires_grad and o.is_floating_point()]
    if grads:
        sum((o.float().sum() * (k + 1) for k, o in enumerate(grads))).backward()


def compare_one(info, module_input, training: bool) -> list[str]:
    """Differences between the CPU and neuron runs of one module input ([] if none)."""
    ctor, fwd = module_input.constructor_input, module_input.forward_input
    torch.manual_seed(0)
    module = info.module_cls(*ctor.args, **ctor.kwargs).train(training)
    lazy = isinstance(module, LazyModuleMixin)
    dev_module = None if lazy else copy.deepcopy(module).to(DEV)
    cpu_args, cpu_kwargs = to_device(fwd.args, "cpu"), to_device(fwd.kwargs, "cpu")
    dev_args, dev_kwargs = to_device(fwd.args, DEV), to_device(fwd.kwargs, DEV)
    torch.manual_seed(1)
    try:
        cpu_out = tensors(module(*cpu_args, **cpu_kwargs))
    except Exception:  # noqa: BLE001 - an input the CPU rejects is not compared
        return []
    if lazy:
        dev_module = copy.deepcopy(module).to(DEV)
        for p in dev_module.parameters():
            p.grad = None
    torch.manual_seed(1)
    dev_out = tensors(dev_module(*dev_args, **dev_kwargs))
    problems = []
    if len(cpu_out) != len(dev_out):
        return [f"{len(dev_out)} outputs, the CPU's {len(cpu_out)}"]
    for k, (a, b) in enumerate(zip(cpu_out, dev_out, strict=True)):
        if b.device.type != DEV:
            problems.append(f"output {k} on {b.device}")
        elif not torch.allclose(a.detach(), b.detach().cpu(), equal_nan=True, **TOL):
            problems.append(f"output {k} differs by {(a - b.cpu()).abs().max().item():.2e}")
    backward_of(cpu_out)
    backward_of(dev_out)
    for (name, p), q in zip(module.named_parameters(), dev_module.parameters(), strict=True):
        if p.grad is None:
            continue
        if q.grad is None:
            problems.append(f"no gradient for {name}")
        elif not torch.allclose(p.grad, q.grad.cpu(), equal_nan=True, **TOL):
            problems.append(f"gradient of {name} differs")
    for k, (a, b) in enumerate(zip(tensors(cpu_args), tensors(dev_args), strict=True)):
        if a.grad is None:
            continue
        if b.grad is None or not torch.allclose(a.grad, b.grad.cpu(), equal_nan=True, **TOL):
            problems.append(f"gradient of input {k} differs")
    return problems


@pytest.mark.parametrize("info", module_db, ids=[i.formatted_name for i in module_db])
def test_module_matches_the_cpu(info):
    failures = []
    compared = 0
    torch.manual_seed(0)  # the inputs are random: the same ones whatever ran before
    for training in (True, False):
        inputs = info.module_inputs_func(
            info, device="cpu", dtype=torch.float32, requires_grad=True, training=training
        )
        for k, module_input in enumerate(inputs):
            if module_input.forward_input is None:
                continue
            compared += 1
            problems = compare_one(info, module_input, training)
            if problems:
                mode = "train" if training else "eval"
                ctor = module_input.constructor_input
                made = f"{info.module_cls.__name__}(*{ctor.args}, **{ctor.kwargs})"
                failures.append(f"input {k} ({mode}, {made}): {problems}")
    assert compared, "no input was compared"
    assert not failures, "\n".join(failures[:5])
