"""Compatibility shims of ``torch.distributed`` for the ``neuron`` device.

Each names the upstream behaviour it works around and changes nothing for other
devices.

torch.distributed (the default backend)
    ``init_process_group()`` without a backend gives, since torch 2.6, only the
    accelerator's backend (``BackendConfig`` with ``Backend.UNDEFINED`` maps just the
    accelerator's device type), so CPU tensors and object collectives then fail with
    "No backend type associated with device type cpu". Code written for TorchNeuron
    expects ``cpu:gloo,neuron:neuron`` there (as torch < 2.6 gave ``cpu:gloo,cuda:nccl``;
    the change: pytorch/pytorch#142216, "Detect accelerator type when backend is not
    specified").
    The shim makes an undefined backend mean ``cpu:gloo,neuron:neuron`` when the
    accelerator is neuron; an explicit backend, and every other accelerator, are left
    alone.

torch.testing._internal.distributed.fake_pg (the "fake" process group)
    The fake backend registers itself for a fixed device list (cpu, cuda, hpu, xpu), so
    a collective on a neuron tensor in a fake group fails with "No backend type
    associated with device type neuron". Upstream's one-process DTensor tests
    (``LocalDTensorTestBase``, the ``...WithLocalTensor`` classes) and tracing with a
    fake group run on the accelerator's device type, neuron here (no upstream issue
    found; the list is in ``fake_pg.py``'s registration). The shim registers
    the fake backend once more through ``Backend.register_backend``, with neuron added
    to the devices it already lists; its factory and every other device stay as they
    are.

torch.testing._internal.distributed._tensor.common_dtensor (DTensorTestBase)
    Upstream's multi-process DTensor test base picks the accelerator's device type and
    its default backend (``neuron``), but ``DTensorTestBase.init_pg`` refuses every
    backend outside a fixed list (nccl, gloo, hccl, xccl, ...) unless it is spelled
    ``cpu:gloo,<device>:<backend>``: "Backend neuron not supported!" for every
    PrivateUse1 backend (pytorch/pytorch#193438, open, extends the list with the
    registered PrivateUse1 backend). The shim hands ``init_pg`` the default neuron
    backend as ``cpu:gloo,neuron:neuron`` (what ``init_process_group()`` gives on
    neuron) and, as ``init_pg`` does for nccl/xccl, makes the rank's device current.
    Other backends, devices and the one-process (LocalTensor) base are untouched.

torch.nn.parallel.DistributedDataParallel (bf16 compression hooks)
    ``DDP._check_comm_hook`` refuses ``bf16_compress_hook`` and
    ``bf16_compress_wrapper_hook`` unless the module is on CUDA with NCCL >= 2.10 or on
    XPU with XCCL — a hard-coded device list, not a capability query (XPU was added to
    it by pytorch/pytorch#146808; no issue for other devices found). The ``neuron``
    backend reduces bfloat16, so for modules on neuron the shim passes those two hooks
    to the same check under another name; every other check still applies.
"""

from __future__ import annotations

import functools
import inspect
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import distributed as ddp_module

from ..adapters.import_hooks import on_import
from ..adapters.monkey_patch import is_patched, mark, wrap
from .backend import BACKEND_NAME


def install() -> None:
    """Applies the shims (now for modules already imported, else on their import)."""
    patch_default_process_group_backend()
    allow_ddp_bf16_comm_hooks()
    on_import("torch.testing._internal.distributed.fake_pg", fake_process_group_on_neuron)
    on_import(
        "torch.testing._internal.distributed._tensor.common_dtensor", dtensor_test_base_on_neuron
    )


def patch_default_process_group_backend() -> None:
    """See the module docstring (the default backend)."""
    if not dist.is_available():
        return

    def make(original: Any) -> Any:
        @functools.wraps(original)
        def __init__(self: Any, backend: Any) -> None:
            accelerator = torch._C._get_accelerator().type
            if str(backend) == dist.Backend.UNDEFINED and accelerator == "neuron":
                backend = dist.Backend("cpu:gloo,neuron:neuron")
            original(self, backend)

        return __init__

    wrap(dist.distributed_c10d.BackendConfig, "__init__", make)


def fake_process_group_on_neuron(fake_pg: ModuleType) -> None:
    """See the module docstring (the "fake" process group)."""
    devices = list(dist.Backend.backend_capability.get(dist.Backend.FAKE, []))
    if "neuron" in devices:
        return
    dist.Backend.register_backend(
        dist.Backend.FAKE, fake_pg._create_fake_pg, extended_api=True, devices=[*devices, "neuron"]
    )


def dtensor_test_base_on_neuron(common_dtensor: ModuleType) -> None:
    """See the module docstring (DTensorTestBase)."""

    def make(original: Any) -> Any:
        @functools.wraps(original)
        def init_pg(self: Any, eager_init: bool, backend: str | None = None) -> None:
            if self.device_type == "neuron" and (backend or self.backend) == BACKEND_NAME:
                backend = f"cpu:gloo,neuron:{BACKEND_NAME}"
                torch.accelerator.set_device_index(self.rank)
            original(self, eager_init, backend)

        return init_pg

    wrap(common_dtensor.DTensorTestBase, "init_pg", make)


_BF16_HOOKS = ("bf16_compress_hook", "bf16_compress_wrapper_hook")


def allow_ddp_bf16_comm_hooks() -> None:
    """See the module docstring (DistributedDataParallel's bf16 compression hooks)."""
    ddp = ddp_module.DistributedDataParallel
    check = ddp._check_comm_hook
    if is_patched(check):
        return

    def _check_comm_hook(self, hook):
        if getattr(hook, "__name__", None) in _BF16_HOOKS and self.device_type == "neuron":
            # Every other check still applies: they see the hook under another name.
            def stand_in(*args, **kwargs):
                return hook(*args, **kwargs)

            stand_in.__signature__ = inspect.signature(hook)
            stand_in.__name__ = f"neuron_{hook.__name__}"
            return check(self, stand_in)
        return check(self, hook)

    _check_comm_hook.__doc__ = check.__doc__
    ddp._check_comm_hook = mark(_check_comm_hook)
