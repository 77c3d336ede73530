"""AOTAutograd's RNG-state operators for neuron tensors.

When a compiled graph recomputes a random op in its backward (activation
checkpointing under ``torch.compile``), AOTAutograd wraps the op in two
higher-order operators of ``torch/_prims/rng_prims.py``: ``run_and_save_rng_state``
(the forward saves the device's RNG state, then runs the op) and
``run_with_rng_state`` (the backward runs the op again from that state). Upstream
implements them for a fixed list of devices (cuda, cpu, hpu, xpu) and raises
``AssertionError: Backend not supported for neuron`` for any other — with the
``neuron``, ``inductor`` and ``aot_eager`` backends alike (pytorch/pytorch#193112,
open, for every PrivateUse1 backend; its fix, pytorch/pytorch#193113, resolves the
PrivateUse1 backend at run time). This module adds neuron,
the way upstream does it for CUDA: the state is ``torch.neuron.get_rng_state()``
(16 bytes; restoring it replays the same numbers exactly).

Upstream has no registration hook for these two operators (it has one,
``register_graphsafe_rng_dispatch``, for the graph-safe variant only), so neuron is
added beside the existing device entries: the backend-select, fake-tensor and
proxy-tracing kernels dispatch neuron tensors here and leave every other device to
upstream's kernel.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._C import DispatchKey
from torch._higher_order_ops.utils import registered_hop_fake_fns
from torch._prims import rng_prims
from torch.fx.experimental.proxy_tensor import ProxyTorchDispatchMode, track_tensor_tree
from torch.utils import _pytree as pytree

_registered = False


def _save_neuron(op, *args, **kwargs):
    return torch.neuron.get_rng_state(), op(*args, **kwargs)


def _run_neuron(rng_state, op, *args, **kwargs):
    current = torch.neuron.get_rng_state()
    torch.neuron.set_rng_state(rng_state.cpu())
    try:
        return op(*args, **kwargs)
    finally:
        torch.neuron.set_rng_state(current)


def _on_neuron(args: tuple, kwargs: dict[str, Any]) -> bool:
    return rng_prims.get_device(args, kwargs) == "neuron"


def _neuron_first(upstream, neuron, args_of=lambda a: a):
    """A kernel that runs ``neuron`` for neuron tensors, else ``upstream``."""

    def kernel(*args, **kwargs):
        if _on_neuron(args_of(args), kwargs):
            return neuron(*args, **kwargs)
        return upstream(*args, **kwargs)

    return kernel


def register() -> None:
    """Adds neuron to both operators (once; called when torch._prims.rng_prims is
    imported)."""
    global _registered
    if _registered:
        return
    _registered = True
    save, run = rng_prims.run_and_save_rng_state, rng_prims.run_with_rng_state
    # save(op, *args): the tensors follow the op; run(state, op, *args): the
    # state and the op come first.
    after_op, after_state = (lambda a: a[1:]), (lambda a: a[2:])

    for hop, neuron, args_of in ((save, _save_neuron, after_op), (run, _run_neuron, after_state)):
        hop.py_kernels[DispatchKey.PrivateUse1] = neuron
        hop.py_kernels[DispatchKey.BackendSelect] = _neuron_first(
            hop.py_kernels[DispatchKey.BackendSelect], neuron, args_of
        )
    # run_with_rng_state's fake kernel runs the op alone, whatever the device.
    registered_hop_fake_fns[save] = _neuron_first(
        registered_hop_fake_fns[save], _save_neuron, after_op
    )

    # Tracing run_and_save_rng_state: upstream's kernel computes the result with
    # its own device list, then records the call; the same for neuron.
    def trace_save(mode, op, *args, **kwargs):
        out = _save_neuron(op, *args, **kwargs)
        proxy_args = pytree.tree_map(mode.tracer.unwrap_proxy, (op, *args))
        proxy_kwargs = pytree.tree_map(mode.tracer.unwrap_proxy, kwargs)
        out_proxy = mode.tracer.create_proxy("call_function", save, proxy_args, proxy_kwargs)
        return track_tensor_tree(out, out_proxy, constant=None, tracer=mode.tracer)

    upstream_trace = save.python_key_table[ProxyTorchDispatchMode]

    def trace(mode, op, *args, **kwargs):
        if _on_neuron(args, kwargs):
            return trace_save(mode, op, *args, **kwargs)
        return upstream_trace(mode, op, *args, **kwargs)

    save.python_key_table[ProxyTorchDispatchMode] = trace
    # The dispatch caches of both operators hold the kernels they resolved.
    for hop in (save, run):
        hop._dispatch_cache.clear()
