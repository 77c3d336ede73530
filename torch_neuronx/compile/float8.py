"""float8 under ``torch.compile``: the rewrites neuron's graphs get so that every
float8 op that works eagerly compiles, bit for bit as in eager mode.

Inductor generates C++ kernels for neuron (``inductor_device.py``), and its C++
backend handles float8 only as a storage type: loads convert to float, stores
convert back. Two kinds of op break that (on CPU tensors too, ``backend="inductor"``):

- ops that pick elements rather than compute them, whose kernels are a ``where``
  between float8 values (``torch.where``, ``slice_scatter`` — a slice assignment —
  ``select_scatter``, ...): the C++ backend's dtype propagation promotes the bool
  mask with float8, which torch refuses ("Promotion for Float8 Types is not
  supported"). Moving bytes is all they do, so they run on the tensors' bits
  (``view(torch.uint8)``) and the result is viewed back as float8: the same bits;
- an integer tensor converted to float8 where Inductor folds the conversion into
  an index expression (``torch.arange(n).to(torch.float8_e5m2)``): the C++ kernel
  asks for ``Vectorized<Float8_e5m2>::arange``, which does not exist. Eager
  mode converts integers to float8 through float (c10's float8 types are built
  from a float), so the conversion goes through float32 explicitly: the same
  rounding, and a conversion the C++ backend has.

``rewrite`` is the post-grad pass Inductor runs on graphs with neuron tensors
(``register_backend_for_device(device_custom_pass=...)``).
"""

from __future__ import annotations

import torch

aten = torch.ops.aten
prims = torch.ops.prims

FLOAT8 = frozenset(
    d
    for d in (
        getattr(torch, name, None)
        for name in ("float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz", "float8_e4m3fnuz")
    )
    if d is not None
)

# Ops that only move elements: on uint8 bits they give the same bits.
_MOVES = (
    aten.where.self,
    aten.slice_scatter.default,
    aten.select_scatter.default,
    aten.diagonal_scatter.default,
    aten.as_strided_scatter.default,
)


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _is_float8(node) -> bool:
    v = _val(node)
    return isinstance(v, torch.Tensor) and v.dtype in FLOAT8


def _insert(graph: torch.fx.Graph, target, args, val, kwargs=None):
    node = graph.call_function(target, tuple(args), kwargs or {})
    node.meta["val"] = val
    return node


def _bits_of(graph, node):
    return _insert(graph, aten.view.dtype, (node, torch.uint8), _val(node).view(torch.uint8))


def _on_bits(graph: torch.fx.Graph, node: torch.fx.Node) -> bool:
    """``node`` (a move of float8 elements) computed on uint8 bits."""
    out = _val(node)
    if not (isinstance(out, torch.Tensor) and out.dtype in FLOAT8):
        return False
    tensor_args = [a for a in node.args if isinstance(_val(a), torch.Tensor)]
    # Every element moved must be float8 of the result's dtype (where's mask is
    # bool and stays as it is); a mixed-dtype op is left to Inductor.
    moved = [a for a in tensor_args if _val(a).dtype != torch.bool]
    if not moved or any(_val(a).dtype != out.dtype for a in moved):
        return False
    if any(isinstance(a, float) for a in node.args):  # a value, not an index
        return False
    with graph.inserting_before(node):
        args = [_bits_of(graph, a) if _is_float8(a) else a for a in node.args]
        bits = _insert(graph, node.target, args, out.view(torch.uint8), dict(node.kwargs))
        back = _insert(graph, aten.view.dtype, (bits, out.dtype), out)
    node.replace_all_uses_with(back)
    graph.erase_node(node)
    return True


def _through_float32(graph: torch.fx.Graph, node: torch.fx.Node) -> bool:
    """An integer tensor converted to float8: through float32."""
    out = _val(node)
    src = node.args[0] if node.args else None
    if not (isinstance(out, torch.Tensor) and out.dtype in FLOAT8 and _val(src) is not None):
        return False
    if _val(src).is_floating_point() or _val(src).is_complex() or _val(src).dtype == torch.bool:
        return False
    with graph.inserting_before(node):
        # `| 0` changes no bit, and stops Inductor's index propagation, which
        # would fold an index expression's (arange's) conversions back into
        # one to float8: the integers are computed as integers, then converted.
        src = _insert(graph, aten.bitwise_or.Scalar, (src, 0), _val(src))
        f32_val = _val(src).to(torch.float32)
        f32 = _insert(graph, prims.convert_element_type.default, (src, torch.float32), f32_val)
        conv = _insert(graph, prims.convert_element_type.default, (f32, out.dtype), out)
    node.replace_all_uses_with(conv)
    graph.erase_node(node)
    return True


def rewrite(graph: torch.fx.Graph) -> int:
    """Rewrites ``graph`` in place (see the module docstring); the number of
    nodes rewritten."""
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in _MOVES:
            count += _on_bits(graph, node)
        elif node.target is prims.convert_element_type.default:
            count += _through_float32(graph, node)
    return count
