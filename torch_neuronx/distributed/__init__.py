"""The ``neuron`` backend of ``torch.distributed``.

Importing torch_neuronx registers it for the ``neuron`` device, so that
``dist.init_process_group("neuron")`` works, and ``init_process_group()``
with no backend picks ``cpu:gloo,neuron:neuron`` (CPU tensors and
``barrier()`` keep working) as it picks ``cpu:gloo,cuda:nccl`` on CUDA.

- ``backend``: the process-group factory (transports: shared memory within a
  host, gloo between hosts, both for a group spanning hosts);
- ``shims``: the upstream behaviours worked around for the device.
"""

from __future__ import annotations

import torch.distributed as dist

from . import backend, shims
from .backend import BACKEND_NAME, cleanup_stale_shared_memory, host_identity

__all__ = ["BACKEND_NAME", "cleanup_stale_shared_memory", "host_identity", "register"]


def register() -> None:
    """Registers the backend for the neuron device, and its shims (idempotent)."""
    if not dist.is_available():
        return
    if BACKEND_NAME not in dist.Backend.backend_list:
        dist.Backend.register_backend(
            BACKEND_NAME, backend._create_backend, extended_api=True, devices=["neuron"]
        )
    shims.install()
