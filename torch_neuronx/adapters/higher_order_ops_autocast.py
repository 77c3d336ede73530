"""Higher-order operators inside ``torch.autocast("neuron")``: a compatibility shim.

A higher-order operator (flex_attention and its backward, cond, while_loop,
invoke_subgraph, ...) dispatches in Python and must have a kernel — or a
fallthrough — for every dispatch key it meets. Upstream makes the autocast keys of
CPU, CUDA and XPU fall through by default (``torch/_ops.py``,
``_HIGHER_ORDER_OP_DEFAULT_FALLTHROUGH_DISPATCH_KEYS``) but not PrivateUse1's, so
inside a neuron autocast region every such operator raised "could not find kernel
for HigherOrderOperator ... at dispatch key DispatchKey.AutocastPrivateUse1" —
TorchTitan's FlexAttention models, whose backward runs in the region, among them.
No upstream issue found. The shim gives neuron's autocast key the same default:
added to that list for operators created later, a fallthrough for those that exist,
except where an operator has its own neuron autocast kernel (flex_attention's casts,
flex_attention_support.py).
"""

from __future__ import annotations

from torch import _ops
from torch._C import DispatchKey


def install() -> None:
    """Called once when torch_neuronx loads."""
    key = DispatchKey.AutocastPrivateUse1
    defaults = _ops._HIGHER_ORDER_OP_DEFAULT_FALLTHROUGH_DISPATCH_KEYS
    if key in defaults:
        return
    defaults.append(key)
    for hop in _ops._higher_order_ops.values():
        if key not in hop.py_kernels:
            hop.fallthrough(key)
