"""Compatibility shims for third-party libraries that do not know the ``neuron`` device.

Each shim names the upstream behaviour it works around, changes nothing for other
devices, and is applied only when the library is imported (no import cost otherwise).

safetensors
    The Rust core of ``safetensors`` parses ``device=`` strings against a fixed list
    (cpu, cuda, mps, npu, xpu, xla, mlu, musa, hpu) and rejects every other device with
    ``SafetensorError: device neuron is invalid`` — out-of-tree PyTorch devices cannot
    be named at all (upstream: safetensors/safetensors PR #779, "pluggable
    device-transfer hook for custom device support", open). The shim makes
    ``safetensors.torch.load_file`` (and ``load_model``, which calls it) accept
    ``"neuron"``, ``"neuron:N"`` and ``torch.device("neuron", N)``: the file is read on
    the CPU (memory-mapped, as safetensors does) and each tensor copied to the device.
    ``safe_open`` is left alone; it accepts a device *index* (``device=1``), which torch
    resolves to the current accelerator, ``neuron:1``. Saving needs no shim.

torch.distributed (default backend)
    ``init_process_group()`` without a backend gives, since torch 2.6, only the
    accelerator's backend (``BackendConfig`` with ``Backend.UNDEFINED`` maps just the
    accelerator's device type), so CPU tensors and object collectives then fail with
    "No backend type associated with device type cpu". Code written for TorchNeuron
    expects ``cpu:gloo,neuron:neuron`` there (as torch < 2.6 gave ``cpu:gloo,cuda:nccl``).
    The shim makes an undefined backend mean ``cpu:gloo,neuron:neuron`` when the
    accelerator is neuron; an explicit backend, and every other accelerator, are left
    alone.

torch.testing._internal.distributed.fake_pg (the "fake" process group)
    The fake backend registers itself for a fixed device list (cpu, cuda, hpu, xpu), so
    a collective on a neuron tensor in a fake group fails with "No backend type
    associated with device type neuron". Upstream's one-process DTensor tests
    (``LocalDTensorTestBase``, the ``...WithLocalTensor`` classes) and tracing with a
    fake group run on the accelerator's device type, neuron here. The shim registers
    the fake backend once more through ``Backend.register_backend``, with neuron added
    to the devices it already lists; its factory and every other device stay as they
    are.

torch.nn.parallel.DistributedDataParallel (bf16 compression hooks)
    ``DDP._check_comm_hook`` refuses ``bf16_compress_hook`` and
    ``bf16_compress_wrapper_hook`` unless the module is on CUDA with NCCL >= 2.10 or on
    XPU with XCCL — a hard-coded device list, not a capability query. The ``neuron``
    backend reduces bfloat16, so for modules on neuron the shim passes those two hooks
    to the same check under another name; every other check still applies.

torch._inductor (C++ kernels on a device other than "cpu")
    Inductor generates C++ kernels for neuron (``CppScheduling``, registered with
    ``register_backend_for_device``), but two of its paths decide by the device *type*
    instead of asking the device's scheduling: ``utils.get_current_backend()`` maps
    every device but cpu/mps/xpu/tpu to ``config.cuda_backend`` ("triton"), so
    ``CppKernel`` takes Triton's dtype branches and asserts; and the scheduler's loop
    reordering runs its GPU variant for non-CPU nodes
    (``_try_reindex_pointwise_for_reduction``), which fails on C++ kernel groups. The
    device's own config (``register_backend_for_device(device_custom_config=...)``) is
    stored but never read in torch 2.13. When neuron registers with Inductor the shim
    sets ``cuda_backend = "cpp"`` and turns off ``loop_ordering_after_fusion`` and
    ``loop_reindexing_after_fusion`` — settings that only GPU devices read, so CPU
    compiles are unchanged (this CPU build of torch has no GPU devices).
"""

from __future__ import annotations

import functools
import importlib.abc
import inspect
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch


def _neuron_device(device: Any) -> torch.device | None:
    """``device`` as a neuron torch.device, or None if it names another device."""
    if isinstance(device, str) and (device == "neuron" or device.startswith("neuron:")):
        device = torch.device(device)
    if isinstance(device, torch.device) and device.type == "neuron":
        index = torch.neuron.current_device() if device.index is None else device.index
        count = torch.neuron.device_count()
        if index >= count:
            raise RuntimeError(
                f"cannot load tensors onto neuron:{index}: torch.neuron.device_count() is "
                f"{count}; pass an existing device"
            )
        return torch.device("neuron", index)
    return None


def _patch_safetensors_torch(module: ModuleType) -> None:
    original = module.load_file
    if getattr(original, "_neuron_shim", False):
        return

    @functools.wraps(original)
    def load_file(filename: Any, device: Any = "cpu", **kwargs: Any) -> dict[str, torch.Tensor]:
        target = _neuron_device(device)
        if target is None:
            return original(filename, device=device, **kwargs)
        tensors = original(filename, device="cpu", **kwargs)
        return {name: t.to(target) for name, t in tensors.items()}

    load_file._neuron_shim = True  # type: ignore[attr-defined]
    module.load_file = load_file


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Runs ``patch(module)`` right after the module ``name`` is first executed."""

    def __init__(self, name: str, patch: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.patch = patch

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        spec = None
        for finder in sys.meta_path:  # the finders after this one (editable installs too)
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        # The module's own loader stays (source, resources); only this spec's
        # loader instance runs the patch after executing the module.
        loader = spec.loader
        exec_module = loader.exec_module
        patch = self.patch

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            patch(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def _patch_default_process_group_backend() -> None:
    import torch.distributed as dist

    if not dist.is_available():
        return
    cls = dist.distributed_c10d.BackendConfig
    original = cls.__init__
    if getattr(original, "_neuron_shim", False):
        return

    @functools.wraps(original)
    def __init__(self: Any, backend: Any) -> None:
        if str(backend) == dist.Backend.UNDEFINED and torch._C._get_accelerator().type == "neuron":
            backend = dist.Backend("cpu:gloo,neuron:neuron")
        original(self, backend)

    __init__._neuron_shim = True  # type: ignore[attr-defined]
    cls.__init__ = __init__  # type: ignore[method-assign]


def _fake_process_group_on_neuron(fake_pg: ModuleType) -> None:
    """See the module docstring (the "fake" process group)."""
    import torch.distributed as dist

    devices = list(dist.Backend.backend_capability.get(dist.Backend.FAKE, []))
    if "neuron" in devices:
        return
    dist.Backend.register_backend(
        dist.Backend.FAKE, fake_pg._create_fake_pg, extended_api=True, devices=[*devices, "neuron"]
    )


_BF16_HOOKS = ("bf16_compress_hook", "bf16_compress_wrapper_hook")


def allow_ddp_bf16_comm_hooks() -> None:
    """See the module docstring (DistributedDataParallel's bf16 compression hooks)."""
    from torch.nn.parallel import distributed as ddp_module

    ddp = ddp_module.DistributedDataParallel
    check = ddp._check_comm_hook
    if getattr(check, "_neuron", False):
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

    _check_comm_hook._neuron = True
    _check_comm_hook.__doc__ = check.__doc__
    ddp._check_comm_hook = _check_comm_hook


def inductor_cpp_codegen_on_neuron() -> None:
    """See the module docstring (torch._inductor, C++ kernels on a device other than cpu)."""
    from torch._inductor import config

    config.cuda_backend = "cpp"
    config.loop_ordering_after_fusion = False
    config.loop_reindexing_after_fusion = False


def _on_import(name: str, patch: Callable[[ModuleType], None]) -> None:
    """``patch(module)`` now if ``name`` is imported, else when it is."""
    if name in sys.modules:
        patch(sys.modules[name])
    elif not any(isinstance(f, _PatchOnImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport(name, patch))


def install() -> None:
    """Applies the shims (now for libraries already imported, else on their import)."""
    _on_import("safetensors.torch", _patch_safetensors_torch)
    _patch_default_process_group_backend()
    _on_import("torch.testing._internal.distributed.fake_pg", _fake_process_group_on_neuron)
    _on_import("torch._inductor.compile_fx", _register_with_inductor)
    _on_import("torch._dynamo.trace_rules", _dynamo_skips_runtime)
    _on_import("torch.compiler._cache", _register_program_artifacts)
    _on_import("torch._inductor.codecache", _record_loaded_programs)


def _register_program_artifacts(cache_module: ModuleType) -> None:
    # Before load_cache_artifacts() can meet one (compile/program_cache.py).
    from .compile.program_cache import register_artifact_type

    register_artifact_type(cache_module)


def _record_loaded_programs(codecache: ModuleType) -> None:
    from .compile.program_cache import record_loaded_libraries

    record_loaded_libraries(codecache)


def _dynamo_skips_runtime(trace_rules: ModuleType) -> None:
    # torch_neuronx is the device runtime, as torch/cuda is CUDA's: Dynamo must
    # not trace into it (it skips torch/ files for the same reason). A call to it
    # from compiled code (torch.neuron.get_rng_state() in freeze_rng_state(),
    # synchronize(), memory stats) runs as Python between graphs.
    trace_rules.add(__name__.split(".")[0])


def _register_with_inductor(module: ModuleType) -> None:
    # Not a patch: neuron registers as an Inductor device as soon as Inductor
    # can compile (torch_neuronx/compile/inductor_device.py says why then).
    from .compile.inductor_device import register

    register()
