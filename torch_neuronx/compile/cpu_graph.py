"""A CPU graph compiled with ``backend="neuron"`` runs on neuron (TorchNeuron's CPU autocopy).

TorchNeuron's backend copies the CPU tensors a graph is called with to the device
and returns neuron tensors (``TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY=1`` makes a
CPU input an error instead). A graph whose tensors are all on the CPU (a function
called with CPU tensors, a CPU ``nn.Module``: its parameters are graph inputs) is
therefore moved to neuron as a whole before Inductor compiles it:

- its CPU inputs are copied to the device at each call (differentiably: the
  gradients of CPU leaves come back to the CPU, where autograd keeps them);
- the tensors it creates on the CPU (``torch.ones(3)``, ``device="cpu"``,
  ``device=x.device``, which Dynamo folds to ``cpu``) are created on neuron;
- inputs it mutates are copied back into the caller's CPU tensors (eager semantics);
- its random ops still draw from the CPU generator, on the CPU, so that the
  compiled graph gives the numbers the same code gives eagerly on the CPU (the
  values are copied to the device); dropout draws only its mask there;
- its outputs are neuron tensors (``TORCH_NEURONX_RETAIN_DEVICE_MODE=1``: CPU ones).

A graph that already computes on neuron (a model on neuron) keeps its CPU tensors
where eager mode puts them (see ``backend._cpu_inputs_to_copy``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx import GraphModule, Node

from . import env_flag

CPU = torch.device("cpu")


def _value(node: Any) -> Any:
    return node.meta.get("example_value") if isinstance(node, Node) else None


def _is_tensor_on(value: Any, device_type: str) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == device_type


def runs_on_cpu(gm: GraphModule, example_inputs: Sequence[Any]) -> bool:
    """No tensor of the graph is on neuron, and some are on the CPU: a CPU graph."""
    if any(_is_tensor_on(t, "neuron") for t in example_inputs):
        return False
    values = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    values += [_value(n) for n in gm.graph.nodes]
    flat = [v for v in torch.utils._pytree.tree_leaves(values) if isinstance(v, torch.Tensor)]
    return any(t.device.type == "cpu" for t in flat) and not any(
        t.device.type == "neuron" for t in flat
    )


def cpu_input_indices(example_inputs: Sequence[Any]) -> list[int]:
    return [i for i, t in enumerate(example_inputs) if _is_tensor_on(t, "cpu")]


# Random ops, by how they are drawn on the CPU. Factories take no tensor; "like"
# ops and in-place fills read only their tensor's shape, dtype and strides;
# dropout's noise depends only on its input's shape (the input is multiplied by it).
_RANDOM_FACTORIES = {torch.rand, torch.randn, torch.randint, torch.randperm, torch.normal}
_RANDOM_LIKE = {torch.rand_like, torch.randn_like, torch.randint_like}
_DROPOUTS = {F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, torch.dropout}
_RANDOM_ON_VALUES = {
    torch.bernoulli,
    torch.multinomial,
    torch.poisson,
    torch.normal,
    F.alpha_dropout,
    F.feature_alpha_dropout,
    torch.alpha_dropout,
    torch.feature_alpha_dropout,
    torch.feature_dropout,
    F.rrelu,
    F.gumbel_softmax,
    F.scaled_dot_product_attention,
}
_RANDOM_FILLS = {
    "bernoulli_",
    "uniform_",
    "normal_",
    "random_",
    "exponential_",
    "geometric_",
    "cauchy_",
    "log_normal_",
}
_RANDOM_METHODS = {"bernoulli", "multinomial"}


def _is_random(node: Node) -> bool:
    if node.op == "call_method":
        return node.target in _RANDOM_FILLS or node.target in _RANDOM_METHODS
    if node.op != "call_function":
        return False
    target = node.target
    if target is F.scaled_dot_product_attention:
        p = node.kwargs.get("dropout_p", node.args[4] if len(node.args) > 4 else 0.0)
        return p != 0.0
    return (
        target in _RANDOM_FACTORIES
        or target in _RANDOM_LIKE
        or target in _DROPOUTS
        or (target in _RANDOM_ON_VALUES)
    )


def _has_tensor_arg(node: Node) -> bool:
    found: list[Node] = []
    torch.fx.node.map_arg((node.args, node.kwargs), found.append)
    return any(isinstance(_value(n), torch.Tensor) for n in found)


def _retarget_devices(node: Node, device: torch.device) -> None:
    """CPU devices named in ``node``'s arguments become ``device``."""

    def swap(a):
        if isinstance(a, torch.device) and a.type == "cpu":
            return device
        return a

    args = torch.utils._pytree.tree_map(swap, node.args)
    kwargs = torch.utils._pytree.tree_map(swap, dict(node.kwargs))
    if kwargs.get("device") == "cpu":
        kwargs["device"] = device
    if node.target in ("to", torch.Tensor.to):
        args = tuple(device if a == "cpu" else a for a in args)
    node.args, node.kwargs = args, kwargs
    if node.op == "call_method" and node.target == "cpu":
        node.target, node.args = "to", (*node.args, device)


def _is_torch_factory(node: Node) -> bool:
    """A torch function that creates a CPU tensor on the default device."""
    target = node.target
    return (
        node.op == "call_function"
        and getattr(torch, getattr(target, "__name__", ""), None) is target
        and _is_tensor_on(_value(node), "cpu")
        and "device" not in node.kwargs
        and not _has_tensor_arg(node)
    )


def _draw_on_cpu(graph: torch.fx.Graph, node: Node, device: torch.device) -> None:
    """Rewrites the random op ``node`` to draw on the CPU (the CPU generator, as
    eager on CPU tensors) and hands its values to ``device``."""

    def to_cpu(a):
        if isinstance(a, Node) and isinstance(_value(a), torch.Tensor):
            return graph.call_method("to", (a, CPU))
        return a

    def like_on_cpu(a):
        return graph.call_function(torch.empty_like, (a,), {"device": CPU})

    with graph.inserting_before(node):
        if node.op == "call_method" and node.target in _RANDOM_FILLS:
            # Fills read only the shape and dtype of what they fill.
            self_, *rest = node.args
            rest, kwargs = torch.utils._pytree.tree_map(to_cpu, (tuple(rest), dict(node.kwargs)))
            drawn = graph.call_method(node.target, (like_on_cpu(self_), *rest), kwargs)
            moved = graph.call_method("to", (drawn, device))
            replacement = graph.call_method("copy_", (self_, moved))
        elif node.target in _DROPOUTS:
            x, *rest = node.args
            kwargs = dict(node.kwargs)
            inplace = kwargs.pop("inplace", False)
            if node.target is not torch.dropout and len(rest) > 2:
                inplace, rest = rest[2], rest[:2]
            ones = graph.call_function(torch.ones_like, (x,), {"device": CPU})
            noise = graph.call_function(node.target, (ones, *rest), kwargs)
            moved = graph.call_method("to", (noise, device))
            replacement = graph.call_method("mul_" if inplace else "mul", (x, moved))
        else:
            if node.target in _RANDOM_LIKE:
                x, *rest = node.args
                args, kwargs = (like_on_cpu(x), *rest), dict(node.kwargs)
            else:
                args, kwargs = torch.utils._pytree.tree_map(
                    to_cpu, (tuple(node.args), dict(node.kwargs))
                )
            if kwargs.get("device") is not None:
                kwargs["device"] = CPU
            drawn = graph.create_node(node.op, node.target, args, kwargs)
            replacement = graph.call_method("to", (drawn, device))
    node.replace_all_uses_with(replacement)
    graph.erase_node(node)


def move_graph_to(gm: GraphModule, device: torch.device) -> None:
    """Rewrites ``gm`` (a CPU graph from Dynamo) to compute on ``device`` (module
    docstring): its CPU placements become ``device``, its random ops draw on the CPU."""
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op not in ("call_function", "call_method") or node.target is operator.getitem:
            continue
        if _is_random(node):
            _draw_on_cpu(graph, node, device)
            continue
        _retarget_devices(node, device)
        if _is_torch_factory(node):
            node.kwargs = {**node.kwargs, "device": device}
    graph.lint()
    gm.recompile()


def example_inputs_on(
    gm: GraphModule, example_inputs: Sequence[Any], devices: dict[int, torch.device]
) -> list[Any]:
    """``example_inputs`` with input ``i`` on ``devices[i]``, for compiling.

    Dynamo's fake tensor of an input is moved (in its fake mode), not the real
    tensor: the moved one keeps its sizes' symbols and their sources, which the
    guards of a dynamic-shape graph name (a new tensor would get fresh symbols
    no guard can refer to).
    """
    inputs = list(example_inputs)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, device in devices.items():
        fake = _value(placeholders[i]) if len(placeholders) == len(inputs) else None
        if isinstance(fake, FakeTensor):
            with fake.fake_mode:
                inputs[i] = fake.to(device)
        else:
            inputs[i] = inputs[i].to(device)
    return inputs


def retain_device_mode() -> bool:
    """TORCH_NEURONX_RETAIN_DEVICE_MODE=1 (TorchNeuron's): the outputs of a CPU graph
    come back to the CPU, where its inputs were (for code and test suites that
    expect the device they passed in)."""
    return env_flag("TORCH_NEURONX_RETAIN_DEVICE_MODE")


def with_inputs_on(
    compiled: Callable, cpu_indices: Sequence[int], device: torch.device
) -> Callable:
    """``compiled`` (a graph moved to ``device``) called with its CPU inputs copied
    there; the CPU inputs it mutated get the new values back."""

    def run(*args):
        args = list(args)
        copies = {}
        for i in cpu_indices:
            copy = args[i].to(device, non_blocking=True)
            copies[i] = (args[i], copy, copy._version)
            args[i] = copy
        out = compiled(*args)
        for original, copy, version in copies.values():
            if copy._version != version:  # mutated in the graph (AOTAutograd bumps it)
                original.copy_(copy)
        if retain_device_mode():
            out = torch.utils._pytree.tree_map_only(torch.Tensor, lambda t: t.to(CPU), out)
        return out

    return run
