"""The ``neuron`` backend of ``torch.compile`` — for now, graphs run op by op.

Libraries pick a compile backend named after the device: transformers compiles its
static-cache decoding step with ``backend="neuron"`` on neuron tensors, and
``Trainer(torch_compile=True)`` does the same. This backend makes those paths work
today: Dynamo captures the graph, AOTAutograd splits forward and backward, and each
graph runs as the eager neuron ops it consists of (the results are eager mode's,
bit for bit). Turning graphs into cached device programs launched as one work item
is the next step (issue 10); it replaces ``_run_graph`` and keeps this entry point.

Registered through the ``torch_dynamo_backends`` entry point, so
``"neuron" in torch._dynamo.list_backends()`` without importing this module first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def _run_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> Callable:
    # An FX GraphModule runs its nodes as eager ops. Boxed: AOTAutograd hands the
    # arguments as one list it may free early.
    from functorch.compile import make_boxed_func

    return make_boxed_func(gm.forward)


def neuron_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor], **kwargs):
    """``torch.compile(model, backend="neuron")``: forward and backward graphs via AOTAutograd."""
    from torch._dynamo.backends.common import aot_autograd

    compiler = aot_autograd(fw_compiler=_run_graph, bw_compiler=_run_graph)
    return compiler(gm, example_inputs, **kwargs)
