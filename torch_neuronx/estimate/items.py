"""Which operator calls become device items, and what the profiler calls them.

An eager op on neuron queues one work item unless it only changes metadata, and
the item carries the name and the tensors of the kernel that ran. A planning run
sees operators at the Python dispatch key, so it applies the dispatcher's own
choice for each operator (``torch._C._dispatch_dump_table``):

- a kernel of the backend for PrivateUse1 (structured kernels, the hand-written
  ones, the generic fallback): one item named after the operator
  (``aten::add_.Tensor``), over the tensors in schema order, then the results
  the kernel allocates (``AliasPlan``'s order: ``op_cost.h``);
- ATen's default (CompositeExplicitAutograd) kernel: no item of its own; the
  kernel runs and the operators it calls are seen one by one (``mul_.Scalar``
  becomes ``mul.out``, ``zeros`` becomes ``empty`` and ``zero_``);
- views, factories of uninitialised memory, metadata ops: no item;
- ``copy_``: ``aten::copy_`` on one device, ``copy_host_to_device`` and the
  like across (ops/copy.cpp);
- collectives (c10d and the functional collectives): one ``collective`` item.

The rules are decided once per operator overload and cached.
"""

from __future__ import annotations

import re

import torch

# No item: factories of uninitialised memory and metadata-only kernels the
# backend registers (registration/register_ops.cpp "Factories and metadata").
NO_ITEM = {
    "aten::empty.memory_format",
    "aten::empty_strided",
    "aten::resize_",
    "aten::set_",
    "aten::set_.source_Storage",
    "aten::set_.source_Storage_storage_offset",
    "aten::set_.source_Tensor",
    "aten::is_set_to",
    "aten::record_stream",
    "aten::_has_compatible_shallow_copy_type",
    "aten::_fused_sdp_choice",
    "aten::lift_fresh",
}

# Collective ops -> (the kind the cost model takes, the item the neuron backend
# queues for it: csrc/distributed/neuron_backend_collectives.cpp and _p2p.cpp
# name each after its ProcessGroup method; a functional collective runs the
# same method).
COLLECTIVES = {
    "c10d::allreduce_": ("allreduce", "c10d::allreduce"),
    "c10d::allreduce_coalesced_": ("allreduce", "c10d::allreduce_coalesced"),
    "c10d::allgather_": ("allgather", "c10d::allgather"),
    "c10d::_allgather_base_": ("allgather", "c10d::_allgather_base"),
    "c10d::allgather_into_tensor_coalesced_": ("allgather", "c10d::_allgather_base"),
    "c10d::allgather_coalesced_": ("allgather", "c10d::allgather"),
    "c10d::reduce_scatter_": ("reducescatter", "c10d::_reduce_scatter_base"),
    "c10d::_reduce_scatter_base_": ("reducescatter", "c10d::_reduce_scatter_base"),
    "c10d::reduce_scatter_tensor_coalesced_": ("reducescatter", "c10d::_reduce_scatter_base"),
    "c10d::alltoall_": ("alltoall", "c10d::alltoall"),
    "c10d::alltoall_base_": ("alltoall", "c10d::alltoall_base"),
    "c10d::broadcast_": ("broadcast", "c10d::broadcast"),
    "c10d::reduce_": ("reduce", "c10d::reduce"),
    "c10d::send": ("p2p", "c10d::send"),
    "c10d::recv_": ("p2p", "c10d::recv"),
    "c10d::recv_any_source_": ("p2p", "c10d::recv"),
    "c10d::barrier": ("barrier", "c10d::barrier"),
    "_c10d_functional::all_reduce": ("allreduce", "c10d::allreduce"),
    "_c10d_functional::all_reduce_": ("allreduce", "c10d::allreduce"),
    "_c10d_functional::all_reduce_coalesced": ("allreduce", "c10d::allreduce_coalesced"),
    "_c10d_functional::all_gather_into_tensor": ("allgather", "c10d::_allgather_base"),
    "_c10d_functional::all_gather_into_tensor_out": ("allgather", "c10d::_allgather_base"),
    "_c10d_functional::all_gather_into_tensor_coalesced": ("allgather", "c10d::_allgather_base"),
    "_c10d_functional::reduce_scatter_tensor": ("reducescatter", "c10d::_reduce_scatter_base"),
    "_c10d_functional::reduce_scatter_tensor_coalesced": (
        "reducescatter",
        "c10d::_reduce_scatter_base",
    ),
    "_c10d_functional::all_to_all_single": ("alltoall", "c10d::alltoall_base"),
    "_c10d_functional::broadcast": ("broadcast", "c10d::broadcast"),
    "_c10d_functional::broadcast_": ("broadcast", "c10d::broadcast"),
}

# Arguments a hand-written kernel does not hand its item (its AliasPlan leaves
# them out): native_layer_norm_backward records dy, x, mean, rstd, gamma and
# the results (ops/layer_norm.cpp), not the bias.
UNRECORDED_ARGS = {"aten::native_layer_norm_backward": {"bias"}}

# Kinds of operator.
VIEW = "view"  # no item, the fake mode answers
ITEM = "item"  # one compute item
COPY = "copy"  # copy_: a copy item
COMPOSITE = "composite"  # ATen's default kernel runs; its ops are seen
COLLECTIVE = "collective"
READ = "read"  # _local_scalar_dense: a host read of one element

_SOURCE = re.compile(r"^PrivateUse1: .*\[(?P<kind>[^\]]+)\]$", re.M)


def _schema_name(op: torch._ops.OpOverload) -> str:
    s = op._schema
    return f"{s.name}.{s.overload_name}" if s.overload_name else s.name


def _is_view(op: torch._ops.OpOverload) -> bool:
    """Every result aliases an input without writing it (a view), or the op
    returns nothing a kernel computes (shape queries)."""
    rets = op._schema.returns
    if not rets:
        return False
    for r in rets:
        a = r.alias_info
        if a is None or a.is_write:
            return False
    return True


def composite_key(op: torch._ops.OpOverload):
    """The dispatch key of the kernel serving PrivateUse1 for ``op`` when that kernel
    is a composition of other operators — ATen's default kernel, or a Python
    kernel (FSDP2's ``fsdp::chunk_cat``, ...) — else None (the backend's own
    kernel or its fallback: one item). NKI-routed operators (torch_neuronx/nki)
    are "nki" (one kernel item)."""
    table = torch._C._dispatch_dump_table(op.name())
    m = _SOURCE.search(table)
    if m is None:
        return None
    line = m.group(0)
    if m.group("kind") == "math kernel":
        # CompositeImplicitAutograd: a real run decomposes it before the
        # backend; it reaches this mode only when called on an unwrapped
        # tensor inside a subclass's handler (DTensor's vocabulary mask: `|`).
        return torch._C.DispatchKey.CompositeImplicitAutograd
    if m.group("kind") == "default backend kernel":
        if "NonFunctional" in line:
            return torch._C.DispatchKey.CompositeExplicitAutogradNonFunctional
        return torch._C.DispatchKey.CompositeExplicitAutograd
    if m.group("kind") == "kernel" and re.search(r"\.py:\d+ \[kernel\]$", line):
        if "torch_neuronx/nki/" in line:
            return "nki"
        return torch._C.DispatchKey.PrivateUse1
    return None


class OpRule:
    """What one operator overload does on neuron: ``kind`` and the item name."""

    __slots__ = ("kind", "name", "key", "collective", "tensor_args", "fresh", "n_returns")

    def __init__(self, kind, name, op=None, key=None, collective=None):
        self.kind = kind
        self.name = name
        self.key = key  # the composite kernel's key (COMPOSITE)
        self.collective = collective  # the collective's kind (COLLECTIVE)
        # The kernel's tensors: the arguments that hold tensors (by position and
        # name), then the results it allocates (not aliases of an argument).
        self.tensor_args: tuple = ()
        self.fresh: tuple = ()
        self.n_returns = 0
        if op is not None:
            s = op._schema
            self.n_returns = len(s.returns)
            skip = UNRECORDED_ARGS.get(name, ())
            self.tensor_args = tuple(
                (i, a.name, a.kwarg_only)
                for i, a in enumerate(s.arguments)
                if "Tensor" in str(a.type) and a.name not in skip
            )
            self.fresh = tuple(i for i, r in enumerate(s.returns) if r.alias_info is None)


_RULES: dict = {}


def rule_for(op) -> OpRule:
    r = _RULES.get(op)
    if r is None:
        r = _RULES[op] = _decide(op)
    return r


def _decide(op) -> OpRule:
    if not isinstance(op, torch._ops.OpOverload):
        return OpRule(VIEW, str(op))
    name = _schema_name(op)
    base = op._schema.name
    if base in COLLECTIVES:
        kind, item = COLLECTIVES[base]
        key = composite_key(op) if base.startswith("_c10d_functional::") else None
        if key is not None:
            # A functional collective's default kernel: a contiguous copy of
            # its input (an aten::copy_ item), then the ProcessGroup method,
            # which dispatches the c10d op seen as the collective.
            return OpRule(COMPOSITE, name, key=key)
        return OpRule(COLLECTIVE, item, collective=kind)
    if base == "_c10d_functional::wait_tensor" and composite_key(op) is not None:
        # Its default kernel waits on the work the collective registered (no
        # item): run it, so the fake group's work is waited as in a real run.
        return OpRule(COMPOSITE, name, key=composite_key(op))
    if base.startswith(("c10d::", "_c10d_functional::", "_dtensor::", "profiler::", "prim::")):
        return OpRule(VIEW, name)  # wait_tensor, Work, marks: no item
    if name in NO_ITEM or base in ("aten::set_",):
        return OpRule(VIEW, name)
    if base == "aten::copy_":
        return OpRule(COPY, name)
    if base == "aten::_local_scalar_dense":
        return OpRule(READ, name)
    if torch.Tag.nondeterministic_seeded not in op.tags and _is_view(op):
        return OpRule(VIEW, name)
    key = composite_key(op)
    if key == "nki":
        # An NKI kernel launch (one kernel item): costed here as an eager op
        # over its tensors, not with the NKI simulator's cost model.
        return OpRule(ITEM, "nki::" + name.split("::", 1)[1], op=op)
    if key is not None:
        return OpRule(COMPOSITE, name, key=key)
    return OpRule(ITEM, name, op=op)
