"""Automatic mixed precision on the ``neuron`` device.

``torch.autocast("neuron")`` runs on the AutocastPrivateUse1 dispatch key, whose
op policy (the C++ side, ``csrc/amp/autocast_policy.cpp``) mirrors CUDA's op lists.
This module holds the Python half: the dtypes autocast accepts on the device and
the default low-precision dtype, bfloat16 (the NeuronCore's native matmul type;
float16 is allowed too, with ``torch.amp.GradScaler("neuron")``).
"""

import torch

DEFAULT_AUTOCAST_DTYPE = torch.bfloat16


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes ``torch.autocast("neuron", dtype=...)`` accepts.

    torch.autocast looks this function up on the device module; any other dtype
    makes it warn and disable autocast, as it does for the CPU and other devices.
    """
    return [torch.float16, torch.bfloat16]  # TorchNeuron's list, in CUDA's order


def _set_default_autocast_dtype() -> None:
    # Autocast state in c10 is thread-local and PyTorch's built-in default for
    # PrivateUse1 is float16. Setting it at load time covers the importing thread
    # and every thread that inherits its ThreadLocalState (autograd's backward
    # workers, at::launch); a Python thread started later begins with float16.
    torch.set_autocast_dtype("neuron", DEFAULT_AUTOCAST_DTYPE)
