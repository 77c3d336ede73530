"""``torch.compile(model, backend="neuron")``.

Inductor's own pipeline (``compile_fx``: decompositions, AOTAutograd's forward and
backward graphs, fusion, C++ kernels, the FX graph cache, dynamic shapes) with neuron
registered as an Inductor device (``inductor_device.py``): each compiled graph runs
as one work item per call. ``options`` takes Inductor's options and ``model_name``
(shown in ``torch.neuron.get_dynamo_metrics()``); ``mode`` takes Inductor's modes.

A graph Inductor cannot compile runs eagerly instead, with one warning naming it
(``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1`` raises instead).

CPU tensors given to a graph that computes on neuron (a model on neuron called with
CPU inputs it moves itself) are copied to the device before the graph runs, and
outputs that were CPU tensors in the traced graph are copied back, so the caller
sees what eager mode gives (``TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY=1`` makes
such an input an error instead).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from . import metrics

_NEURON_OPTIONS = ("model_name",)
_model_name: str | None = None


class NEFFCompilationError(RuntimeError):
    """A graph could not be compiled into a device program (raised instead of
    running it eagerly when TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION is set)."""


def set_model_name(name: str | None) -> None:
    """The model name of graphs compiled from now on without a ``model_name`` option."""
    global _model_name
    _model_name = name


def get_model_name() -> str | None:
    return _model_name


def create_neuron_backend(**options: Any):
    """A ``neuron`` backend with ``options`` bound (``torch.compile(m, backend=...)``)."""

    def backend(gm, example_inputs, **kwargs):
        merged = {**options, **(kwargs.pop("options", None) or {})}
        return neuron_backend(gm, example_inputs, options=merged, **kwargs)

    return backend


def _fallback_disabled() -> bool:
    return os.environ.get("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "0") not in ("", "0")


def _autocopy_disabled() -> bool:
    return os.environ.get("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", "0") not in ("", "0")


def _cpu_inputs_to_copy(example_inputs: Sequence[Any]) -> list[int]:
    """Indices of the CPU tensor inputs of a graph that computes on neuron.

    0-dim CPU tensors stay: eager ops take them as scalars beside neuron tensors.
    A graph with no neuron tensor input is a CPU graph and is left as it is.
    """
    tensors = [(i, t) for i, t in enumerate(example_inputs) if isinstance(t, torch.Tensor)]
    if not any(t.device.type == "neuron" for _, t in tensors):
        return []
    return [i for i, t in tensors if t.device.type == "cpu" and t.dim() > 0]


def _cpu_outputs(gm: torch.fx.GraphModule) -> list[int] | None:
    """Indices of the graph's outputs that are CPU tensors (None: unknown)."""
    (out,) = [n for n in gm.graph.nodes if n.op == "output"]
    values = out.args[0]
    if not isinstance(values, (tuple, list)):
        return None
    cpu = []
    for i, v in enumerate(values):
        val = v.meta.get("example_value") if isinstance(v, torch.fx.Node) else None
        if isinstance(val, torch.Tensor) and val.device.type == "cpu":
            cpu.append(i)
    return cpu


def _with_cpu_autocopy(gm, example_inputs, compile_graph):
    """``compile_graph(example_inputs)``, the CPU inputs of a neuron graph copied first."""
    to_copy = _cpu_inputs_to_copy(example_inputs)
    if not to_copy:
        return compile_graph(example_inputs)
    if _autocopy_disabled():
        i = to_copy[0]
        raise RuntimeError(
            f"Input tensor at index {i} is on cpu device, but the graph computes on "
            f"neuron: move it with .to('neuron') (TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY "
            "is set, so CPU inputs are not copied)"
        )
    cpu_outputs = _cpu_outputs(gm)
    device = next(
        t.device
        for t in example_inputs
        if isinstance(t, torch.Tensor) and t.device.type == "neuron"
    )
    inputs = list(example_inputs)
    for i in to_copy:
        inputs[i] = inputs[i].to(device)
    compiled = compile_graph(inputs)

    def run(*args):
        args = list(args)
        originals = {i: args[i] for i in to_copy}
        for i in to_copy:
            args[i] = args[i].to(device, non_blocking=True)
        versions = {i: args[i]._version for i in to_copy}
        outs = compiled(*args)
        # A graph that mutates an input mutates the copy: the caller's tensor gets it.
        for i in to_copy:
            if args[i]._version != versions[i]:
                originals[i].copy_(args[i])
        if cpu_outputs and isinstance(outs, (tuple, list)):
            outs = list(outs)
            for i in cpu_outputs:
                if isinstance(outs[i], torch.Tensor):
                    outs[i] = outs[i].cpu()
        return outs

    return run


def _config_patches(mode: str | None, options: dict[str, Any]) -> dict[str, Any]:
    from torch._inductor import list_mode_options

    patches: dict[str, Any] = {}
    if mode and mode != "default":
        patches.update(list_mode_options(mode))
        # Capture and replay of device programs is not there yet: programs run
        # as they are launched.
        patches.pop("triton.cudagraphs", None)
    patches.update({k: v for k, v in options.items() if k not in _NEURON_OPTIONS})
    return patches


def neuron_backend(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    mode: str | None = None,
    options: dict[str, Any] | None = None,
):
    """The ``neuron`` compile backend (see the module docstring)."""
    from torch._inductor.compile_fx import compile_fx

    from .inductor_device import register

    register()
    options = dict(options or {})
    timer = metrics.GraphTimer(gm, options.get("model_name") or get_model_name())
    patches = _config_patches(mode, options)
    try:
        compiled = _with_cpu_autocopy(
            gm, example_inputs, lambda inputs: compile_fx(gm, inputs, config_patches=patches)
        )
    except Exception as e:
        if "TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY" in str(e):
            raise
        if _fallback_disabled():
            raise NEFFCompilationError(
                f"neuron: {timer.record.graph_name} could not be compiled: {e}"
            ) from e
        warnings.warn(
            f"neuron: {timer.record.graph_name} could not be compiled and runs eagerly instead "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); set "
            "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1 to raise instead",
            stacklevel=2,
        )
        timer.finish(fell_back=True)
        return gm.forward
    timer.finish(fell_back=False)
    return compiled
