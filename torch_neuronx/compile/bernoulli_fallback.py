"""``bernoulli`` in neuron graphs: a fallback with a result of its own.

A mask drawn the way the CPU's dropout draws it (``empty_like(x).bernoulli_(p)``,
as code that builds its own dropout writes it) is ``bernoulli.p(empty, p)`` in a
compiled training graph. The neuron backend runs random ops as eager calls
(Inductor's ``fallback_random``), and Inductor lowers ``bernoulli.p`` as
``bernoulli_`` on a clone of its input (``InplaceBernoulliFallback``, an in-place
call the wrapper makes between two kernels). When the mask is also saved for
the backward, Inductor's scheduler fuses the mask's readers (``div``, ``mul``)
into the kernel that writes the clone, *before* the in-place call fills it:
the forward reads the uninitialised clone and returns NaN. It is Inductor's
bug, not the device's — ``torch.compile(backend="inductor")`` with
``fallback_random=True`` gives the same NaN on CPU tensors (torch 2.13 and
2.14; a forward with ``requires_grad`` inputs, a matmul after the dropout).

So in neuron graphs (Inductor's post-grad pass for the device,
``inductor_device.NeuronGraphPass``) each ``bernoulli.p`` becomes
``torch_neuronx::bernoulli_p``: a functional custom op, which Inductor lowers
to a fallback call that returns a new buffer — an ordinary producer its readers
are scheduled after. It calls ``aten::bernoulli.p`` itself, so it draws the same
numbers from the same generator as eager mode.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


@torch.library.custom_op("torch_neuronx::bernoulli_p", mutates_args=())
def bernoulli_p(shape_of: torch.Tensor, p: float) -> torch.Tensor:
    """``aten::bernoulli.p``: zeros and ones with probability ``p``, laid out as
    ``shape_of`` (whose values are not read)."""
    return aten.bernoulli.p(shape_of, p)


@bernoulli_p.register_fake
def _(shape_of: torch.Tensor, p: float) -> torch.Tensor:
    return torch.empty_like(shape_of)


def _on_neuron(node: torch.fx.Node) -> bool:
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and value.device.type == "neuron"


def rewrite(gm: torch.fx.GraphModule) -> int:
    """Makes each ``bernoulli.p`` on neuron in ``gm`` the custom op (module
    docstring); the number of nodes rewritten. Subgraphs included: with more than
    one random op Inductor orders them through ``control_deps`` calls, each op in
    a subgraph of its own."""
    count = 0
    for module in gm.modules():
        if isinstance(module, torch.fx.GraphModule):
            rewritten = _rewrite_graph(module.graph)
            if rewritten and module is not gm:
                module.recompile()
            count += rewritten
    return count


def _rewrite_graph(graph: torch.fx.Graph) -> int:
    count = 0
    for node in graph.nodes:
        if node.op != "call_function" or node.target is not aten.bernoulli.p:
            continue
        if node.kwargs.get("generator") is not None or not _on_neuron(node):
            continue
        x = node.args[0]
        p = node.args[1] if len(node.args) > 1 else node.kwargs.get("p", 0.5)
        node.target = torch.ops.torch_neuronx.bernoulli_p.default
        node.args, node.kwargs = (x, float(p)), {}
        count += 1
    return count
