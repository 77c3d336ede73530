"""FlexAttention under ``torch.compile`` on neuron: its dense form, compiled.

Dynamo puts ``flex_attention`` into a graph as a higher-order operator (HOP) with the
``score_mod`` and ``mask_mod`` as subgraphs; AOTAutograd keeps it as one
``flex_attention`` call in the forward graph and one ``flex_attention_backward`` call
in the backward graph (the forward saves the query, key, value, output and
log-sum-exp; the backward recomputes the scores). Inductor lowers both calls to
fused templates: Triton's on every device but the CPU, and the CPU's C++ template
is forward-only (no log-sum-exp output, so no training). Neither runs on neuron.

So in a graph with neuron tensors (Inductor's post-grad pass for the device,
``inductor_device.NeuronGraphPass``), each call is replaced by the operator's own
dense implementation — the code eager ``flex_attention`` runs on every device
(``sdpa_dense`` and ``sdpa_dense_backward`` in torch/_higher_order_ops/
flex_attention.py: the full score matrix, ``score_mod`` and ``mask_mod`` applied to
it elementwise through ``vmap``, a softmax, and for the backward the same
log-sum-exp recomputation and gradient formula). It is traced with Inductor's own
decompositions into ATen ops, which the graph's C++ kernels compute like any other
op of the graph, fused with its neighbours: no graph break, no eager fallback,
forward and backward, in ``fullgraph=True`` and dynamic-shape graphs.

The results are those of eager FlexAttention (CPU or neuron) up to the rounding
of fused kernels. The block mask's sparse block lists are not used to skip
blocks: the dense form evaluates ``mask_mod`` at every (query, key) position, which
gives the same result (the block lists are derived from ``mask_mod``); the cost is
that of attention with a dense mask, O(L·S) memory per head.

Imported by ``inductor_device`` (with Inductor) only.
"""

from __future__ import annotations

import functools
import operator

import torch
import torch.utils._pytree as pytree
from torch._dynamo.utils import counters
from torch._higher_order_ops.flex_attention import (
    flex_attention,
    flex_attention_backward,
    sdpa_dense,
    sdpa_dense_backward,
)
from torch._inductor.pattern_matcher import (
    CallFunctionVarArgs,
    PatternMatcherPass,
    fwd_only,
    register_graph_pattern,
)
from torch._inductor.virtualized import V
from torch._subclasses.fake_tensor import unset_fake_temporarily


def _targets() -> tuple:
    return flex_attention, flex_attention_backward


def has_flex_attention(graph: torch.fx.Graph) -> bool:
    hops = _targets()
    return any(n.op == "call_function" and n.target in hops for n in graph.nodes)


def _dense(target):
    """The HOP's eager (CompositeExplicitAutograd) implementation."""
    return sdpa_dense if target is flex_attention else sdpa_dense_backward


def _kernel_options(node: torch.fx.Node) -> dict:
    """The kernel_options argument of a flex_attention(_backward) call."""
    index = 6 if node.target is flex_attention else 11
    options = node.args[index] if len(node.args) > index else {}
    return options if isinstance(options, dict) else {}


def _captured_grads_needed(node: torch.fx.Node, gm: torch.fx.GraphModule) -> list[bool]:
    """For a flex_attention_backward call: which tensors captured by the score_mod
    get a gradient (a learned bias). Its joint graph (traced by AOTAutograd, when
    requires_grad was known) returns the gradients of (score, b, h, q_idx, kv_idx,
    *captured), None for a tensor that needs none."""
    if node.target is not flex_attention_backward:
        return []
    joint = node.args[8]
    joint_gm = operator.attrgetter(joint.target)(gm) if isinstance(joint, torch.fx.Node) else joint
    (outputs,) = joint_gm.graph.find_nodes(op="output")[0].args
    return [grad is not None for grad in outputs[5:]]


def _replace(match, *args, **kwargs) -> None:
    """Replaces the matched HOP call with its dense implementation, traced."""
    (node,) = match.nodes
    gm = match.ctx.graph.owning_module
    backend = _kernel_options(node).get("BACKEND", "AUTO")
    if backend == "FLASH":
        # FLASH selects CUDA's FlashAttention kernels, whose statistics are in
        # natural log (the dense form's are in base 2, as the Triton kernels').
        raise NotImplementedError(
            "neuron: flex_attention's kernel_options BACKEND='FLASH' selects CUDA's "
            "FlashAttention kernels; on neuron leave BACKEND unset or use 'AUTO' "
            "(compiled FlexAttention runs in its dense form there)"
        )
    implementation = _dense(node.target)
    leaves, spec = pytree.tree_flatten((args, kwargs))
    # Tensor and SymInt arguments become inputs of the traced replacement; the
    # score/mask subgraphs (get_attr nodes) and constants are closed over.
    inputs: list[torch.fx.Node] = []
    slots: list[tuple[bool, object]] = []  # (is an input, its index or the constant)
    for leaf in leaves:
        if isinstance(leaf, torch.fx.Node) and leaf.op == "get_attr":
            slots.append((False, operator.attrgetter(leaf.target)(gm)))
        elif isinstance(leaf, torch.fx.Node):
            slots.append((True, len(inputs)))
            inputs.append(leaf)
        else:
            slots.append((False, leaf))

    needs_grad = _captured_grads_needed(node, gm)

    def dense(*values):
        flat = [values[v] if is_input else v for is_input, v in slots]
        call_args, call_kwargs = pytree.tree_unflatten(flat, spec)
        if needs_grad:
            # The dense backward computes the gradient of a captured tensor only if
            # that tensor requires grad, which no tensor of a compiled graph does.
            for buffer, needed in zip(call_args[12], needs_grad, strict=True):
                if needed:
                    buffer.requires_grad_(True)
        return implementation(*call_args, **call_kwargs)

    match.replace_by_example(dense, inputs, trace_fn=_trace)


def _trace(fn, example_values) -> torch.fx.GraphModule:
    """``fn`` traced into ATen ops with Inductor's decompositions (as Inductor's own
    post-grad replacements are), its scalar tensor constants (the dense forms'
    ``torch.tensor(-inf)``) made ``full`` calls: the pattern matcher inlines
    operator calls only, and a constant would be a real tensor in a fake graph."""
    gm = fwd_only(fn, example_values, run_functional_passes=True)
    for node in list(gm.graph.nodes):
        if node.op != "get_attr":
            continue
        value = operator.attrgetter(node.target)(gm)
        if not isinstance(value, torch.Tensor):
            continue
        if value.numel() != 1 or value.dim() != 0:
            raise NotImplementedError(
                f"neuron: a tensor constant of shape {tuple(value.shape)} in FlexAttention's "
                "dense form"
            )
        with unset_fake_temporarily():  # a real tensor, read under the fake mode
            scalar = value.item()
        with gm.graph.inserting_before(node):
            full = gm.graph.call_function(
                torch.ops.aten.full.default,
                ([], scalar),
                {"dtype": value.dtype, "device": value.device},
            )
        with V.fake_mode:
            full.meta["val"] = torch.full([], scalar, dtype=value.dtype, device=value.device)
        node.replace_all_uses_with(full)
        gm.graph.erase_node(node)
        delattr(gm, node.target)
    gm.graph.lint()
    gm.recompile()
    return gm


@functools.cache
def _patterns():
    patterns = PatternMatcherPass(pass_name="neuron_flex_attention_dense")
    for target in _targets():
        register_graph_pattern(
            CallFunctionVarArgs(target), pass_dict=patterns, extra_check=_on_neuron
        )(_replace)
    return patterns


def _on_neuron(match) -> bool:
    """The call computes on neuron (a CPU call in the same graph keeps the CPU's
    lowering)."""
    query = match.nodes[0].args[0]
    value = query.meta.get("val") if isinstance(query, torch.fx.Node) else None
    return isinstance(value, torch.Tensor) and value.device.type == "neuron"


def decompose(gm: torch.fx.GraphModule) -> bool:
    """Replaces every FlexAttention HOP call on neuron in ``gm`` by its dense form
    (module docstring); whether there was one. The subgraphs left without users are
    removed."""
    if not has_flex_attention(gm.graph) or not _patterns().apply(gm.graph):
        return False
    counters["neuron"]["flex_attention_dense"] += 1
    for node in list(gm.graph.nodes):
        if node.op == "get_attr" and not node.users:
            gm.graph.erase_node(node)
    return True
