"""``torch.neuron`` (also ``torch_neuronx.neuron``): the device API, as ``torch.cuda`` is
CUDA's.

A package of one module per part — ``device`` (which devices exist, the current one,
synchronisation), ``streams``, ``memory``, ``random``, ``graphs``, ``host_memory``,
``amp``, ``adaptive_eager``, ``errors``, ``compilation_metrics`` — whose public names
are gathered here. ``torch_neuronx`` registers it as torch's device module for
``neuron``. It does not import ``torch_neuronx.compile`` (which imports it).
"""

from .. import _C
from .adaptive_eager import (
    adaptive_eager,
    adaptive_eager_stats,
    is_adaptive_eager_enabled,
    reset_adaptive_eager,
    reset_adaptive_eager_stats,
    set_adaptive_eager,
)
from .amp import get_amp_supported_dtype  # torch.autocast("neuron") looks it up here
from .compilation_metrics import get_dynamo_metrics, reset_dynamo_metrics
from .device import (
    NeuronDeviceProperties,
    _lazy_init,  # noqa: F401  (torch looks for it on device modules)
    current_device,
    device,
    device_count,
    device_of,
    get_device_capability,
    get_device_name,
    get_device_properties,
    init,
    is_available,
    is_bf16_supported,
    is_initialized,
    launch_blocking,
    set_device,
    synchronize,
)
from .errors import DeviceError
from .graphs import NeuronGraph, graph, is_current_stream_capturing
from .host_memory import (
    host_memory_stats,
    host_memory_stats_as_nested_dict,
    reset_accumulated_host_memory_stats,
    reset_peak_host_memory_stats,
)
from .memory import (
    _dump_snapshot,  # noqa: F401
    _record_memory_history,  # noqa: F401
    _snapshot,  # noqa: F401
    empty_cache,
    get_per_process_memory_fraction,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
)
from .random import default_generators as _default_generators
from .random import (
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .streams import (
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)

__all__ = [
    "DeviceError",
    "Event",
    "NeuronDeviceProperties",
    "NeuronGraph",
    "Stream",
    "StreamContext",
    "adaptive_eager",
    "adaptive_eager_stats",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "device_of",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "get_dynamo_metrics",
    "get_per_process_memory_fraction",
    "get_rng_state",
    "get_rng_state_all",
    "graph",
    "host_memory_stats",
    "host_memory_stats_as_nested_dict",
    "init",
    "initial_seed",
    "is_adaptive_eager_enabled",
    "is_available",
    "is_bf16_supported",
    "is_current_stream_capturing",
    "is_initialized",
    "launch_blocking",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_host_memory_stats",
    "reset_accumulated_memory_stats",
    "reset_adaptive_eager",
    "reset_adaptive_eager_stats",
    "reset_dynamo_metrics",
    "reset_peak_host_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_adaptive_eager",
    "set_device",
    "set_per_process_memory_fraction",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
]


def _is_in_bad_fork() -> bool:
    return _C._is_in_bad_fork()


# Inductor asks the device module for these when it registers a PrivateUse1
# device (torch/_inductor/codegen/common.py, init_backend_registration). They are
# torch_neuronx.compile's and import Inductor: compile/registration.py sets the
# function that resolves them when torch_neuronx loads.
_INDUCTOR_NAMES = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen")
_resolve_inductor_name = None  # name -> class, set by compile/registration.py


def __getattr__(name: str):
    if name == "_initialized":
        # torch.cuda._initialized: torch.utils.checkpoint saves and restores the
        # device's RNG state only when the device module says it is initialized
        # (getattr(device_module, "_initialized", False)); without it, a
        # checkpointed region's recomputation drew other dropout masks.
        return is_initialized()
    if name == "default_generators":
        # torch.cuda.default_generators: a tuple of torch.Generator, built on
        # first use (the devices are known only once the runtime is up).
        return _default_generators()
    if name in _INDUCTOR_NAMES and _resolve_inductor_name is not None:
        return _resolve_inductor_name(name)
    raise AttributeError(f"module 'torch.neuron' has no attribute {name!r}")
