"""TorchNeuron's profiling API on torch.profiler.

    from torch.profiler import profile, ProfilerActivity
    from torch_neuronx.profiling import NeuronConfig, ProfileMode, NeuronProfiler

    cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME],
                       profile_output_dir="./profile_output")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                 experimental_config=cfg,
                 on_trace_ready=NeuronProfiler(cfg).export_trace) as prof:
        model(x)
        torch.neuron.synchronize()

Importing this package wraps torch.profiler's trace life cycle (see hooks.py)
so that any profile whose experimental_config carries Neuron settings is
written to its profile_output_dir when it stops; torch_neuronx's import does
it, with the NEURON_RT_INSPECT_ENABLE check (_maybe_start_inspect_from_env).
"""

import importlib

from . import hooks as _hooks
from .config import NeuronConfig, ProfileMode
from .export import NRTProfilerError, ProfileOutputError
from .inspect_env import (  # noqa: F401  (torch_neuronx calls it at import)
    maybe_start_inspect_from_env as _maybe_start_inspect_from_env,
)
from .profiler import NeuronProfiler

_hooks.install()

__all__ = [
    "NRTProfilerError",
    "NeuronConfig",
    "NeuronProfiler",
    "ProfileMode",
    "ProfileOutputError",
    "export_parquet",
]


def __getattr__(name: str):
    # The tables module (export_parquet, ...) is optional and imported on
    # first use: pyarrow is heavy, and the package works without it.
    if name.startswith("_") or name == "tables":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        # importlib, not `from . import tables`: that asks this very
        # __getattr__ for "tables" first.
        tables = importlib.import_module(f"{__name__}.tables")
    except ImportError as e:
        if getattr(e, "name", None) == f"{__name__}.tables":
            raise AttributeError(
                f"module {__name__!r} has no attribute {name!r} (torch_neuronx.profiling.tables "
                "is not installed)"
            ) from None
        raise
    try:
        value = getattr(tables, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value
