"""Automatic mixed precision on the ``neuron`` device.

``torch.autocast("neuron")`` runs on the AutocastPrivateUse1 dispatch key, whose
op policy (the C++ side, ``csrc/amp/autocast_policy.cpp``) mirrors CUDA's op lists.
This module holds the Python half: the dtypes autocast accepts on the device.

The default low-precision dtype is PyTorch's for PrivateUse1, float16, as
TorchNeuron leaves it: code written for it (``checkpoint_sequential`` under a bare
``torch.autocast("neuron")``, say) expects float16 results there. On Trainium
bfloat16 is the better choice for training (the NeuronCore's native matmul type,
float32's exponent range, no loss scaling): pass ``dtype=torch.bfloat16``.
"""

import torch


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes ``torch.autocast("neuron", dtype=...)`` accepts.

    torch.autocast looks this function up on the device module; any other dtype
    makes it warn and disable autocast, as it does for the CPU and other devices.
    """
    return [torch.float16, torch.bfloat16]  # TorchNeuron's list, in CUDA's order
