"""``torch.compile(model, backend="neuron")``.

Inductor's own pipeline (``compile_fx``: decompositions, AOTAutograd's forward and
backward graphs, fusion, C++ kernels, the FX graph cache, dynamic shapes) with neuron
registered as an Inductor device (``inductor_device.py``): each compiled graph runs
as one work item per call. ``options`` takes Inductor's options and ``model_name``
(shown in ``torch.neuron.get_dynamo_metrics()``); ``mode`` takes Inductor's modes.

A graph Inductor cannot compile runs eagerly instead, with one warning naming it
(``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1`` raises instead).
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from . import metrics

_NEURON_OPTIONS = ("model_name",)


def _fallback_disabled() -> bool:
    return os.environ.get("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "0") not in ("", "0")


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
    record = metrics.start_graph(gm, options.get("model_name"))
    start = time.perf_counter()
    try:
        compiled = compile_fx(gm, example_inputs, config_patches=_config_patches(mode, options))
    except Exception as e:
        if _fallback_disabled():
            raise
        warnings.warn(
            f"neuron: {record.name} could not be compiled and runs eagerly instead "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); set "
            "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1 to raise instead",
            stacklevel=2,
        )
        metrics.finish_graph(record, time.perf_counter() - start, fell_back=True)
        return gm.forward
    metrics.finish_graph(record, time.perf_counter() - start, fell_back=False)
    return compiled
