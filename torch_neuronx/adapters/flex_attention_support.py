"""FlexAttention on ``neuron``: a compatibility shim.

``torch.nn.attention.flex_attention`` checks its inputs' device against a fixed
list (``_validate_device``: cuda, cpu, xpu, hpu, mps) and raises "FlexAttention is
only supported on CUDA, CPU, HPU, or MPS devices. Found input tensors on neuron
device" for every other one, although its eager path — the flex_attention
higher-order operator's unfused implementation, forward and backward — is plain
ATen ops that run on any device (upstream's TODO on the check: "Remove once non
cuda/cpu devices support is added"; PrivateUse1 was asked for in the review of
pytorch/pytorch#148656, which added HPU, and Ascend/pytorch#147 reports the same
for torch_npu). The shim admits neuron tensors to that path;
other devices keep upstream's check. Under ``torch.compile`` Dynamo traces the same
check, and each FlexAttention call of a neuron graph is compiled in its dense form
(compile/flex_attention.py).

TorchTitan's newer language models use FlexAttention; TorchNeuron documents only
no-mask and causal attention, so this goes beyond the vendor.
"""

from __future__ import annotations

import functools
from types import ModuleType

import torch
from torch._C import DispatchKey, DispatchKeySet
from torch.amp.autocast_mode import _cast

from .import_hooks import on_import
from .monkey_patch import mark, wrap


def _admit_neuron(flex: ModuleType) -> None:
    made = []

    def make(upstream):
        @functools.wraps(upstream)
        def validate_device(query, key, value) -> None:
            if query.device.type == "neuron":
                return  # the unfused path runs on neuron, forward and backward
            upstream(query, key, value)

        made.append(validate_device)
        return validate_device

    wrap(flex, "_validate_device", make)
    if not made:
        return  # installed already
    (admitted,) = made

    # Under torch.compile Dynamo traces flex_attention's checks, but it skips
    # torch_neuronx's files (compile/registration.py): the wrapper asks to be
    # traced (it compares the device type, a constant while tracing). Applied when
    # Dynamo loads, so that importing FlexAttention does not import Dynamo.
    def traced_by_dynamo(decorators: ModuleType) -> None:
        if flex._validate_device is admitted:
            flex._validate_device = mark(decorators.dont_skip_tracing(admitted))

    on_import("torch._dynamo.decorators", traced_by_dynamo)


def _autocast_on_neuron(hop_module: ModuleType) -> None:
    """The flex_attention higher-order operator under ``torch.autocast("neuron")``.

    Upstream gives the operator autocast kernels for CPU and CUDA only
    (``py_impl(DispatchKey.AutocastCUDA)``), so inside a neuron autocast region —
    TorchTitan's single-device mixed precision — every FlexAttention call raised
    "could not find kernel for HigherOrderOperator flex_attention at dispatch key
    DispatchKey.AutocastPrivateUse1". The same rule as CUDA's: query, key and value
    are cast to the region's dtype, then the operator runs with neuron's autocast
    key excluded.
    """
    hop = hop_module.flex_attention
    if DispatchKey.AutocastPrivateUse1 in hop.py_kernels:
        return

    @hop.py_impl(DispatchKey.AutocastPrivateUse1)
    def flex_attention_autocast_neuron(query, key, value, *rest):
        # rest: score_mod, block_mask, scale, kernel_options and the buffers, as given.
        device_type = query.device.type
        dtype = torch.get_autocast_dtype(device_type)
        query, key, value = (_cast(t, device_type, dtype) for t in (query, key, value))
        with torch._C._ExcludeDispatchKeyGuard(DispatchKeySet(DispatchKey.AutocastPrivateUse1)):
            return hop(query, key, value, *rest)


def install() -> None:
    """Called once when torch_neuronx loads."""
    on_import("torch.nn.attention.flex_attention", _admit_neuron)
    on_import("torch._higher_order_ops.flex_attention", _autocast_on_neuron)
