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


import torch  # noqa: E402

torch.utils.rename_privateuse1_backend("neuron")

# _C registers the backend with c10/ATen; it must load after the rename.
from . import _C, device_module  # noqa: E402
from .device_module import *  # noqa: E402,F401,F403
from .device_module import __all__ as _device_api  # noqa: E402
from .op_stats import (  # noqa: E402
    _track_from_env,  # noqa: E402
    clear_op_stats,
    clear_op_tracking,
    get_executed_ops,
    get_fallback_ops,
)

_track_from_env()

from .compile import use_cache_dir_from_env  # noqa: E402

use_cache_dir_from_env()

torch._register_device_module("neuron", device_module)

# TorchNeuron's spelling: torch_neuronx.neuron is the device module itself. The
# sys.modules entries make `import torch.neuron.memory` (as `import
# torch.cuda.memory`) and `import torch_neuronx.neuron` work: the device module
# is a plain module, not a package, so the import system cannot find them.
neuron = device_module
sys.modules[f"{__name__}.neuron"] = device_module
for _parent in ("torch.neuron", f"{__name__}.neuron"):
    sys.modules[f"{_parent}.memory"] = device_module.memory
del _parent

# Sending a neuron tensor to another process raises a clear error (after
# torch.multiprocessing, imported by torch, registered its own reducers).
from .multiprocessing import register_reducers  # noqa: E402

register_reducers()
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
)

# torch.distributed's `neuron` backend.
from . import distributed  # noqa: E402

distributed.register()

# Shims for libraries that do not know the device yet (safetensors' device names).
from . import compat  # noqa: E402

compat.install()


# NKI: `import nki` / `import neuronxcc.nki` (when no real NKI is installed;
# torch_neuronx_nki.pth does this at interpreter start too), and the
# PyTorch entry points of NKI kernels.
try:
    import _torch_neuronx_nki  # noqa: E402,F401
except ImportError:  # not installed as a distribution (a bare source tree)
    pass


# scaled_dot_product_attention and rms_norm on neuron run as NKI kernels
# (TORCH_NEURONX_DISABLE_NKI_KERNELS=1: off).
from .nki import aten_routing  # noqa: E402

aten_routing.register()


def __getattr__(name: str):
    if name in ("nki_op", "wrap_nki"):
        from .nki import torch_ops

        return getattr(torch_ops, name)
    if name == "nki_jit":
        from .nki.kernel import nki_jit

        return nki_jit
    raise AttributeError(f"module 'torch_neuronx' has no attribute {name!r}")


def _drain_at_exit() -> None:
    # Queued device work must finish before the interpreter and the C++
    # statics it uses are torn down; errors no longer have anyone to go to.
    if _C._is_initialized() and not _C._is_in_bad_fork():
        from .device import _device_range

        for i in _device_range():
            try:
                _C._synchronize(i)
            except RuntimeError:
                pass


atexit.register(_drain_at_exit)

__all__ = list(_device_api) + [
    "clear_op_stats",
    "clear_op_tracking",
    "get_executed_ops",
    "get_fallback_ops",
    "neuron",
]
__version__ = "0.1.0"
