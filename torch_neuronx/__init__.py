"""torch-neuronx: a native PyTorch backend for NeuronCore accelerators.

Importing this package (``import torch`` does it through the
``torch.backends`` entry point) adds the ``neuron`` device: tensors and
modules move there with ``.to("neuron")`` / ``.neuron()``, and the
``torch.neuron`` module holds the device API. The runtime itself starts on
first use, not at import.
"""

import atexit
import sys


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group: importing is the work.

    Defined before ``import torch``: when this package is imported first,
    torch's autoloading calls back into it while it is still initialising.
    """


import torch  # noqa: E402  (after _autoload, see above)

from . import ops as _python_ops  # noqa: E402

# The parts that do not load _C (which must wait for step 1 of _register);
# _register installs them in its steps.
from .adapters import (  # noqa: E402
    flex_attention_support,
    higher_order_ops_autocast,
    multiprocessing,
    safetensors_support,
    tensor_str_support,
    torchtitan_support,
)
from .nki import aten_routing as _aten_routing  # noqa: E402


def _register():
    """Makes ``neuron`` a PyTorch device. Each step needs the ones before it;
    returns the device module."""
    # 1. The name first: _C registers the backend with c10/ATen when it loads.
    torch.utils.rename_privateuse1_backend("neuron")
    # order: these load _C (directly or through neuron), so only after step 1.
    from . import _C, distributed, neuron, op_stats  # noqa: F401  (_C: loaded by neuron)
    from .compile import registration as compile_registration
    from .neuron.adaptive_eager import apply_env as _adaptive_from_env

    # 2. Op tracking from TORCH_NEURONX_OP_TRACKING, before any op runs.
    op_stats._track_from_env()

    # Adaptive eager from TORCH_NEURONX_ADAPTIVE_EAGER, before any op runs.
    _adaptive_from_env()

    # 3. torch.compile: the program cache directory, and hooks that register
    # neuron with Dynamo/Inductor when they are first imported.
    compile_registration.install()

    # 4. torch.neuron: the package torch_neuronx.neuron (TorchNeuron's spelling).
    torch._register_device_module("neuron", neuron)
    _alias_submodules(neuron)

    # 5. Tensor/Module methods (.neuron(), .is_neuron); sending a neuron tensor
    # to another process raises a clear error (after torch.multiprocessing
    # registered its own reducers).
    multiprocessing.register_reducers()
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )

    # 6. torch.distributed's `neuron` backend and its shims.
    distributed.register()

    # 7. Libraries that do not know the device yet: safetensors' device names,
    # FlexAttention's device list, higher-order operators under neuron autocast,
    # TorchTitan's unconditional Triton import; and torch's tensor printing, whose
    # functorch guard outlives a device error raised while printing.
    safetensors_support.install()
    higher_order_ops_autocast.install()
    flex_attention_support.install()
    torchtitan_support.install()
    tensor_str_support.install()

    # 8. NKI: `import nki` / `import neuronxcc.nki` when no real NKI is
    # installed (torch_neuronx_nki.pth does this at interpreter start too),
    # and scaled_dot_product_attention / rms_norm routed to NKI kernels
    # (TORCH_NEURONX_DISABLE_NKI_KERNELS=1: off).
    try:
        import _torch_neuronx_nki  # noqa: F401  optional: absent from a bare source tree
    except ImportError:  # not installed as a distribution (a bare source tree)
        pass
    _aten_routing.register()
    # FlashAttention's ATen ops (CUDA-only in ATen), which varlen_attn calls.
    _python_ops.register()

    # 9. Queued device work finishes before the interpreter exits.
    atexit.register(_drain_at_exit)
    return neuron


def _alias_submodules(neuron) -> None:
    # `import torch.neuron.memory` (as `import torch.cuda.memory`) must find the
    # module torch_neuronx.neuron.memory: torch registered the package under
    # sys.modules["torch.neuron"], so the import system would load its parts a
    # second time under the torch.neuron name.
    prefix = f"{neuron.__name__}."
    for name, module in list(sys.modules.items()):
        if name.startswith(prefix):
            sys.modules["torch.neuron." + name[len(prefix) :]] = module


def _drain_at_exit() -> None:
    # Queued device work must finish before the interpreter and the C++
    # statics it uses are torn down; errors no longer have anyone to go to.
    if _C._is_initialized() and not _C._is_in_bad_fork():
        for i in _device_range():
            try:
                _C._synchronize(i)
            except RuntimeError:
                pass


neuron = _register()

# After _register(): loading _C needs the device's name.
from . import _C, op_stats  # noqa: E402
from .neuron.device import _device_range  # noqa: E402

# Every torch.neuron.<name> is also torch_neuronx.<name>; the package's own
# names besides.
globals().update({name: getattr(neuron, name) for name in neuron.__all__})
_OP_TRACKING = ("clear_op_stats", "clear_op_tracking", "get_executed_ops", "get_fallback_ops")
__all__ = [*neuron.__all__, *_OP_TRACKING, "neuron"]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _OP_TRACKING:
        value = getattr(op_stats, name)
    elif name in ("nki_op", "wrap_nki"):
        from .nki import torch_ops  # lazy: imports Dynamo and Inductor (seconds)

        value = getattr(torch_ops, name)
    elif name == "nki_jit":
        from .nki.kernel import nki_jit  # lazy: the NKI front end, ~30 ms

        value = nki_jit
    else:
        raise AttributeError(f"module 'torch_neuronx' has no attribute {name!r}")
    globals()[name] = value  # later lookups are plain attribute reads
    return value


# torch.profiler learns TorchNeuron's NeuronConfig / custom_profiler_config
# (profiling/hooks.py), and NEURON_RT_INSPECT_ENABLE=1 profiles the whole
# process until exit. After _register(): exit handlers run last-registered
# first, so the profile stops before the runtime drains its queues.
from .profiling import _maybe_start_inspect_from_env  # noqa: E402

_maybe_start_inspect_from_env()
