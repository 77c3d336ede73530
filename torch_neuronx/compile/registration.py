"""How ``torch.compile`` learns about neuron.

Importing torch_neuronx imports neither Dynamo nor Inductor: ``install()`` sets
hooks that act when the part of torch they serve is first imported (at once if it
already is), through the shared import-hook helper.
"""

from __future__ import annotations

from types import ModuleType

from .. import neuron
from ..adapters.import_hooks import on_import
from . import program_cache, rng_state_ops, use_cache_dir_from_env


def install() -> None:
    """Called once when torch_neuronx loads."""
    use_cache_dir_from_env()
    neuron._resolve_inductor_name = _inductor_name
    on_import("torch._inductor.compile_fx", _register_with_inductor)
    on_import("torch._dynamo.trace_rules", _dynamo_skips_runtime)
    on_import("torch.compiler._cache", _register_program_artifacts)
    on_import("torch._inductor.codecache", _record_loaded_programs)
    on_import("torch._prims.rng_prims", _add_neuron_rng_state_ops)


def _add_neuron_rng_state_ops(module: ModuleType) -> None:
    # AOTAutograd's RNG-state operators (activation checkpointing under
    # torch.compile) know only built-in devices (compile/rng_state_ops.py).
    rng_state_ops.register()


def _register_program_artifacts(cache_module: ModuleType) -> None:
    # Before load_cache_artifacts() can meet one (compile/program_cache.py).
    program_cache.register_artifact_type(cache_module)


def _record_loaded_programs(codecache: ModuleType) -> None:
    program_cache.record_loaded_libraries(codecache)


def _dynamo_skips_runtime(trace_rules: ModuleType) -> None:
    # torch_neuronx is the device runtime, as torch/cuda is CUDA's: Dynamo must
    # not trace into it (it skips torch/ files for the same reason). A call to it
    # from compiled code (torch.neuron.get_rng_state() in freeze_rng_state(),
    # synchronize(), memory stats) runs as Python between graphs.
    trace_rules.add(__name__.split(".")[0])


def _register_with_inductor(module: ModuleType) -> None:
    # Not a patch: neuron registers as an Inductor device as soon as Inductor
    # can compile (torch_neuronx/compile/inductor_device.py says why then).
    from .inductor_device import register  # lazy: imports Inductor (seconds)

    register()


def _inductor_name(name: str) -> type:
    """``torch.neuron.Scheduling`` & co.: what Inductor asks the device module for
    when it registers devices on its own (``torch_neuronx/neuron/__init__.py``)."""
    from . import inductor_device  # lazy: imports Inductor (seconds)

    inductor_device.register()
    return {
        "Scheduling": inductor_device.Scheduling,
        "PythonWrapperCodegen": inductor_device.NeuronPythonWrapperCodegen,
        "CppWrapperCodegen": inductor_device.CppWrapperCodegen,
    }[name]
