"""``neuron`` as an Inductor device.

Inductor generates the same vectorised C++ kernels for neuron tensors as for
CPU tensors (``CppScheduling``): the simulated core computes on the host CPU,
and device memory is host memory. What differs is how they run: the generated
Python wrapper allocates its buffers on neuron (the caching allocator) and,
instead of calling a kernel, queues it on the current stream; a whole call of
the graph becomes one work item (``program.py``). Both ``backend="inductor"``
and ``backend="neuron"`` use this.

``register()`` runs when Inductor's ``compile_fx`` is first imported (an
import hook set by ``registration.py``: before Inductor registers devices on its own,
which would drop the cache-version pass), or when Inductor asks the device
module ``torch.neuron`` for ``Scheduling`` & co. (``registration.py`` answers
for it). Importing torch_neuronx does not import this module, nor Inductor.
"""

from __future__ import annotations

import multiprocessing

import torch
from torch._dynamo.device_interface import (
    CpuDeviceProperties,
    CpuInterface,
    register_interface_for_device,
)
from torch._guards import CompileContext
from torch._inductor import config
from torch._inductor.codegen.common import (
    register_backend_for_device,
    register_device_op_overrides,
)
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.custom_graph_pass import CustomGraphModulePass
from torch._inductor.virtualized import V

from ..nki import aten_routing

# bernoulli_fallback: also the pass's custom op, which graphs from Inductor's
# cache call too (defined on import).
from . import bernoulli_fallback, env_flag, flex_attention, float8

# Bumped when the generated wrapper code or the graph pass changes, so that
# graphs cached by another version are not reused: Inductor's FX graph cache key
# includes the uuid of each device's registered custom pass (codecache.py,
# FxGraphHashDetails).
CODEGEN_VERSION = 7


class NeuronGraphPass(CustomGraphModulePass):
    """Inductor's post-grad pass for graphs with neuron tensors: FlexAttention in
    its dense form (``flex_attention.py``), the float8 rewrites (``float8.py``),
    ``bernoulli`` as a fallback with a result of its own (``bernoulli_fallback.py``)."""

    def __call__(self, gm) -> None:
        changed = flex_attention.decompose(gm)
        changed |= bernoulli_fallback.rewrite(gm) > 0
        if float8.rewrite(gm.graph) or changed:
            gm.graph.lint()
            gm.recompile()

    def uuid(self) -> str:
        # Whether ATen ops are routed to NKI kernels (nki/aten_routing.py:
        # TORCH_NEURONX_DISABLE_NKI_KERNELS, TORCH_NEURONX_SIMULATE_NKI_ATTENTION)
        # is decided while a graph is traced: a graph cached with the routing on
        # must not serve a process that turned it off, and the reverse.
        nki = "nki" if aten_routing.enabled() else "no-nki"
        attention = "nki-attention" if aten_routing.simulates_attention() else "cpu-attention"
        return f"torch_neuronx-inductor-wrapper-{CODEGEN_VERSION}-{nki}-{attention}"


Scheduling = CppScheduling
CppWrapperCodegen = CppWrapperCpu


class NeuronInterface(CpuInterface):
    """Dynamo's and Inductor's view of the device (properties, synchronize)."""

    class Worker:
        # Inductor asks the Worker (meant to be safe in compile subprocesses) for
        # the current device when it resolves ``device="neuron"`` without an
        # index (factory ops in a graph) and for properties when it warms up.
        @staticmethod
        def set_device(device: int) -> None:
            torch.neuron.set_device(device)

        @staticmethod
        def current_device() -> int:
            return torch.neuron.current_device()

        @staticmethod
        def get_device_properties(device=None):
            # The kernels Inductor generates run on the host's cores.
            return CpuDeviceProperties(multiprocessing.cpu_count())

    @staticmethod
    def synchronize(device=None):
        torch.neuron.synchronize(device)

    @staticmethod
    def device_count():
        return torch.neuron.device_count()

    @staticmethod
    def current_device():
        return torch.neuron.current_device()

    @staticmethod
    def set_device(device):
        torch.neuron.set_device(device)

    @staticmethod
    def is_available() -> bool:
        return torch.neuron.is_available()

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True


def _program_name() -> str:
    compile_id = CompileContext.current_compile_id()
    phase = V.graph.get_training_phase() if hasattr(V.graph, "get_training_phase") else ""
    name = f"compiled graph {compile_id}" if compile_id is not None else "compiled graph"
    return f"{name} {phase}".strip()


class _NeuronKernelCalls:
    """A wrapper's C++ kernel calls on neuron: queued in the call's program."""

    def _generate_kernel_call_helper(
        self, kernel_name, call_args, *, device=None, triton=True, **kw
    ):
        device = device or V.graph.get_current_device_or_throw()
        if not triton and device.type == "neuron":
            args = "".join(f", {a}" for a in call_args)
            self.writeline(f"_neuron_program.kernel({kernel_name}, {kernel_name!r}{args})")
            return
        return super()._generate_kernel_call_helper(
            kernel_name, call_args, device=device, triton=triton, **kw
        )


class NeuronSubgraphWrapperCodegen(_NeuronKernelCalls, SubgraphPythonWrapperCodegen):
    """A subgraph's wrapper (torch.cond's branches, while_loop's body, ...): a
    function in the graph's module, called inside its program."""


class NeuronPythonWrapperCodegen(_NeuronKernelCalls, PythonWrapperCodegen):
    """The Python wrapper of a graph on neuron: kernels queued, one program per call."""

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            return NeuronSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return NeuronPythonWrapperCodegen()

    def write_header(self) -> None:
        super().write_header()
        self.imports.writeline(
            "from torch_neuronx.compile.program import ProgramLaunch as _ProgramLaunch, as_program"
        )

    def generate_end(self, result) -> None:
        super().generate_end(result)
        idxs = [i for i in V.graph.device_idxs if i is not None]
        device = idxs[0] if idxs else torch.neuron.current_device()
        result.writeline(f"_neuron_program = _ProgramLaunch({_program_name()!r}, {device})")
        # Whether a failing call may have changed its caller's tensors already
        # (program.py, as_program): then it is not re-run eagerly.
        writes_inputs = bool(V.graph.mutated_inputs)
        result.writeline(f"call = as_program(call, _neuron_program, writes_inputs={writes_inputs})")


_registered = False


def _settings_for_cpp_kernels_on_a_device() -> None:
    """A compatibility shim of Inductor for C++ kernels on a device other than "cpu".

    torch._inductor (C++ kernels on a device other than "cpu")
        Inductor generates C++ kernels for neuron (``CppScheduling``, registered with
        ``register_backend_for_device``), but two of its paths decide by the device *type*
        instead of asking the device's scheduling: ``utils.get_current_backend()`` maps
        every device but cpu/mps/xpu/tpu to ``config.cuda_backend`` ("triton"), so
        ``CppKernel`` takes Triton's dtype branches and asserts; and the scheduler's loop
        reordering runs its GPU variant for non-CPU nodes
        (``_try_reindex_pointwise_for_reduction``), which fails on C++ kernel groups; and
        ``aten.cat``'s lowering takes pointwise_cat for non-CPU devices, which C++ kernels
        cannot build for float8 (a float8 ``torch.cat`` compiled on CPU, not on neuron). The
        device's own config (``register_backend_for_device(device_custom_config=...)``) is
        stored but never read in torch 2.13. When neuron registers with Inductor the shim
        sets ``cuda_backend = "cpp"``, turns off ``loop_ordering_after_fusion`` and
        ``loop_reindexing_after_fusion``, and sets ``max_pointwise_cat_inputs`` and
        ``max_complex_pointwise_cat_inputs`` to 0 (every cat a ConcatKernel, as on CPU) —
        settings that only non-CPU devices read, so CPU compiles are unchanged (this CPU
        build of torch has no GPU devices).
    """
    config.cuda_backend = "cpp"
    config.loop_ordering_after_fusion = False
    config.loop_reindexing_after_fusion = False
    # aten.cat: CPU always takes ConcatKernel (a copy per input); other devices
    # may take pointwise_cat (one kernel of masked loads) for up to these many
    # inputs. Neuron's C++ kernels should decide as CPU's do: pointwise_cat was
    # slower for C++ kernels (lowering.py says so), and C++ kernels cannot
    # build it for float8 (a where between float8 values, see float8.py), so a
    # float8 cat compiled on CPU but not on neuron. At 0, every cat on neuron
    # is a ConcatKernel; CPU never reads them.
    config.max_pointwise_cat_inputs = 0
    config.max_complex_pointwise_cat_inputs = 0


def _apply_cache_settings() -> None:
    """TORCH_NEURONX_NEFF_DISABLE_CACHE (TorchNeuron's name): Inductor's caches
    (which hold the compiled programs, kernel libraries here, not NEFF files) off.
    (The cache directory: ``compile.use_cache_dir_from_env``.)"""
    if env_flag("TORCH_NEURONX_NEFF_DISABLE_CACHE"):
        config.force_disable_caches = True


def register() -> None:
    """Registers neuron with Dynamo's device interfaces and Inductor (idempotent)."""
    global _registered
    if _registered:
        return
    _registered = True
    _settings_for_cpp_kernels_on_a_device()
    _apply_cache_settings()
    register_interface_for_device("neuron", NeuronInterface)
    register_device_op_overrides("neuron", CpuDeviceOpOverrides())
    register_backend_for_device(
        "neuron",
        CppScheduling,
        NeuronPythonWrapperCodegen,
        CppWrapperCpu,
        device_custom_pass=NeuronGraphPass(),
    )
