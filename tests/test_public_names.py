"""The public names of ``torch.neuron`` and ``torch_neuronx``, pinned.

The names users reach (``torch.neuron.<name>``, ``torch_neuronx.<name>``, their
``__all__``) and what kind of object each is, so that a change to how the package is
laid out cannot add, drop or change one unnoticed. A deliberate change of the public
surface edits the lists here.
"""

import importlib
import types

import torch

import torch_neuronx

# torch.neuron.__all__ (also torch_neuronx.<name>), with the type of each object.
DEVICE_MODULE = {
    "DeviceError": "type",
    "Event": "_EventMeta",
    "NeuronDeviceProperties": "type",
    "NeuronGraph": "type",
    "Stream": "type",
    "StreamContext": "type",
    "adaptive_eager": "function",
    "adaptive_eager_stats": "function",
    "current_device": "function",
    "current_stream": "function",
    "default_stream": "function",
    "device": "type",
    "device_count": "function",
    "device_of": "type",
    "empty_cache": "function",
    "get_amp_supported_dtype": "function",
    "get_device_capability": "function",
    "get_device_name": "function",
    "get_device_properties": "function",
    "get_dynamo_metrics": "function",
    "get_per_process_memory_fraction": "function",
    "get_rng_state": "function",
    "get_rng_state_all": "function",
    "graph": "type",
    "host_memory_stats": "function",
    "host_memory_stats_as_nested_dict": "function",
    "init": "function",
    "initial_seed": "function",
    "is_adaptive_eager_enabled": "function",
    "is_available": "function",
    "is_bf16_supported": "function",
    "is_current_stream_capturing": "function",
    "is_initialized": "function",
    "launch_blocking": "function",
    "manual_seed": "function",
    "manual_seed_all": "function",
    "max_memory_allocated": "function",
    "max_memory_reserved": "function",
    "mem_get_info": "function",
    "memory_allocated": "function",
    "memory_reserved": "function",
    "memory_snapshot": "function",
    "memory_stats": "function",
    "memory_summary": "function",
    "reset_accumulated_host_memory_stats": "function",
    "reset_accumulated_memory_stats": "function",
    "reset_adaptive_eager": "function",
    "reset_adaptive_eager_stats": "function",
    "reset_dynamo_metrics": "function",
    "reset_peak_host_memory_stats": "function",
    "reset_peak_memory_stats": "function",
    "seed": "function",
    "seed_all": "function",
    "set_adaptive_eager": "function",
    "set_device": "function",
    "set_per_process_memory_fraction": "function",
    "set_rng_state": "function",
    "set_rng_state_all": "function",
    "set_stream": "function",
    "stream": "function",
    "synchronize": "function",
}

# torch_neuronx.__all__ beyond torch.neuron's.
PACKAGE_ONLY = [
    "clear_op_stats",
    "clear_op_tracking",
    "get_executed_ops",
    "get_fallback_ops",
    "neuron",
]

# Names of torch_neuronx resolved on first use (not in __all__).
PACKAGE_LAZY = ["nki_jit", "nki_op", "wrap_nki"]

# torch.neuron.memory's functions (as torch.cuda.memory's).
MEMORY_FUNCTIONS = [
    "empty_cache",
    "get_per_process_memory_fraction",
    "is_initialized",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "set_per_process_memory_fraction",
]


def _public(module) -> dict[str, object]:
    return {n: getattr(module, n) for n in dir(module) if not n.startswith("_")}


def test_device_module_names():
    n = torch.neuron
    assert sorted(n.__all__) == sorted(DEVICE_MODULE)
    assert len(set(n.__all__)) == len(n.__all__)
    assert {name: type(getattr(n, name)).__name__ for name in n.__all__} == DEVICE_MODULE
    # Nothing public beside __all__ but modules (torch.neuron.memory, the parts).
    extra = {k: v for k, v in _public(n).items() if k not in DEVICE_MODULE}
    assert "memory" in extra
    assert all(isinstance(v, types.ModuleType) for v in extra.values()), extra


def test_package_names():
    assert sorted(torch_neuronx.__all__) == sorted([*DEVICE_MODULE, *PACKAGE_ONLY])
    for name in DEVICE_MODULE:  # the same objects under both names
        assert getattr(torch_neuronx, name) is getattr(torch.neuron, name), name
    for name in [*PACKAGE_ONLY, *PACKAGE_LAZY]:
        assert callable(getattr(torch_neuronx, name)) or name == "neuron", name
    assert torch_neuronx.neuron is torch.neuron
    extra = {
        k: v
        for k, v in _public(torch_neuronx).items()
        if k not in torch_neuronx.__all__ and k not in PACKAGE_LAZY
    }
    assert all(isinstance(v, types.ModuleType) for v in extra.values()), extra


def test_memory_module_names():
    memory = torch.neuron.memory
    functions = sorted(k for k, v in _public(memory).items() if isinstance(v, types.FunctionType))
    assert functions == MEMORY_FUNCTIONS
    for name in ("_snapshot", "_record_memory_history", "_dump_snapshot"):
        assert callable(getattr(memory, name)) and getattr(torch.neuron, name) is getattr(
            memory, name
        )


def test_module_paths():
    for path in ("torch.neuron", "torch_neuronx.neuron"):
        assert importlib.import_module(path) is torch.neuron
    for path in ("torch.neuron.memory", "torch_neuronx.neuron.memory"):
        assert importlib.import_module(path) is torch.neuron.memory
    assert torch.get_device_module("neuron") is torch.neuron
