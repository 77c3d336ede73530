"""``torch.compile(model, backend="neuron")``.

Inductor's own pipeline (``compile_fx``: decompositions, AOTAutograd's forward and
backward graphs, fusion, C++ kernels, the FX graph cache, dynamic shapes) with neuron
registered as an Inductor device (``inductor_device.py``): each compiled graph runs
as one work item per call. ``options`` takes Inductor's options and ``model_name``
(shown in ``torch.neuron.get_dynamo_metrics()``); ``mode`` takes Inductor's modes.

Fallback execution (``fallback_policy``) is off by default, as in TorchNeuron
(``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION`` defaults to 1): a graph Inductor cannot
compile raises NEFFCompilationError, and a compiled graph whose program fails on the
device during the call raises NEFFExecutionError (``errors.py``). With it on
(``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0``, or ``options={"fallback_execution":
True}``, which overrides the variable either way), the graph that cannot be compiled
runs eagerly instead, with one warning naming it, and a failed call runs eagerly for
that call, with a warning — unless the program writes into its inputs: the steps that
ran before the failure may have written them, and an eager re-run would apply those
writes twice, so the error is raised.

CPU tensors (TorchNeuron's CPU autocopy): a graph whose tensors are all on the
CPU runs on neuron as a whole (``cpu_graph.py``: inputs copied in, outputs on
neuron, mutations copied back, random ops drawn from the CPU generator). A graph
that computes on neuron keeps the CPU tensors it computes with on the CPU (as in
eager mode) and has those it only moves to neuron copied before it runs.
``TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY=1`` makes such an input an error
(with fallback execution on, the graph runs eagerly where its tensors are).

Random ops draw the numbers they draw eagerly (Inductor's ``fallback_random``:
each is the ATen op, launched in program order, so it claims the same (seed,
offset) from the neuron generator as in eager mode, and dropout's backward uses
the mask its forward drew).

Importing this module imports neither Dynamo nor Inductor (each costs seconds; the
``torch_dynamo_backends`` entry point and ``neuron_dynamo_backend`` import it): the
functions that use them import them when called.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from . import cpu_graph, env_flag, metrics
from .errors import NEFFCompilationError, NEFFExecutionError

__all__ = [
    "NEFFCompilationError",
    "NEFFExecutionError",
    "create_neuron_backend",
    "get_model_name",
    "neuron_backend",
    "set_model_name",
]

# Options the backend takes itself; the rest are Inductor's config.
_NEURON_OPTIONS = ("model_name", "fallback_execution")
_model_name: str | None = None


def set_model_name(name: str | None) -> None:
    """The model name of graphs compiled from now on without a ``model_name`` option."""
    global _model_name
    _model_name = name


def get_model_name() -> str | None:
    return _model_name


def create_neuron_backend(**options: Any):
    """A ``neuron`` backend with ``options`` bound (``torch.compile(m, backend=...)``)."""

    def backend(gm, example_inputs, **kwargs):
        merged = {**options, **(kwargs.pop("options", None) or {})}
        return neuron_backend(gm, example_inputs, options=merged, **kwargs)

    return backend


FALLBACK_ENV = "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"
_TURN_ON = f'set {FALLBACK_ENV}=0 or pass options={{"fallback_execution": True}}'


@dataclasses.dataclass(frozen=True)
class FallbackPolicy:
    """Whether a compiled graph falls back to eager execution (``allowed``), what
    decided it (``source``, for messages) and how to get the other behaviour
    (``to_change``)."""

    allowed: bool
    source: str
    to_change: str


def fallback_policy(options: Mapping[str, Any]) -> FallbackPolicy:
    """Fallback execution for a graph compiled with ``options``: the
    ``fallback_execution`` option (True/False) if given, else
    TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION: "1"/"true" (the default, TorchNeuron's)
    raise, "0"/"false" run eagerly. Read when each graph is compiled, so a malformed
    value is an error at the first compile, not at the first failure it would decide."""
    value = options.get("fallback_execution")
    if value is not None:
        if not isinstance(value, bool):
            raise ValueError(
                f'neuron: options["fallback_execution"] must be True or False, not {value!r}'
            )
        return FallbackPolicy(
            value,
            f'options={{"fallback_execution": {value}}}',
            f'pass options={{"fallback_execution": {not value}}}',
        )
    raw = os.environ.get(FALLBACK_ENV)
    if raw is None:
        return FallbackPolicy(False, f"{FALLBACK_ENV} defaults to 1", _TURN_ON)
    flag = raw.strip().lower()
    if flag in ("1", "true"):
        return FallbackPolicy(False, f"{FALLBACK_ENV}={raw}", _TURN_ON)
    if flag in ("0", "false"):
        return FallbackPolicy(
            True,
            f"{FALLBACK_ENV}={raw}",
            f"unset {FALLBACK_ENV} (or set it to 1) or pass "
            'options={"fallback_execution": False}',
        )
    raise ValueError(
        f"{FALLBACK_ENV}={raw!r} is not a valid value: use 1 or true (the default: a "
        "graph that fails to compile or run raises) or 0 or false (it runs eagerly instead)"
    )


def _moved_to_neuron(node: torch.fx.Node) -> bool:
    """``node`` moves a tensor to a neuron device (``x.to("neuron")``, ``.to(t.device)``)."""
    if not (node.op == "call_method" and node.target in ("to", "cuda")) and node.target not in (
        torch.Tensor.to,
    ):
        return False
    value = node.meta.get("example_value")
    return isinstance(value, torch.Tensor) and value.device.type == "neuron"


def _cpu_inputs_to_copy(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
) -> dict[int, torch.device]:
    """The CPU tensor inputs the graph only moves to neuron: index -> device.

    Copying them before the graph runs changes nothing the graph computes (the moves
    in it become no-ops) and lets the whole graph run on the device. A CPU input the
    graph computes with on the CPU (or returns, or mutates) stays where it is.
    """
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        return {}
    copy = {}
    for i, (node, t) in enumerate(zip(placeholders, example_inputs, strict=True)):
        if not (isinstance(t, torch.Tensor) and t.device.type == "cpu") or not node.users:
            continue
        if all(_moved_to_neuron(u) for u in node.users):
            devices = {u.meta["example_value"].device for u in node.users}
            if len(devices) == 1:
                copy[i] = devices.pop()
    return copy


def _autocopy_refused(to_copy: dict[int, torch.device], fallback: FallbackPolicy) -> bool:
    """TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY and a CPU input to copy: an error
    (TorchNeuron's message), or with fallback execution on, an eager run."""
    if not to_copy or not env_flag("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY"):
        return False
    message = (
        f"Input tensor at index {min(to_copy)} is on cpu device, expected neuron. Move "
        "tensor to Neuron device first with tensor.to('neuron') "
        "(TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY is set, so CPU inputs are not copied)"
    )
    if not fallback.allowed:
        raise RuntimeError(message)
    warnings.warn(
        f"neuron: {message}; the graph runs eagerly instead (fallback execution is on: "
        f"{fallback.source}; to raise, {fallback.to_change})",
        stacklevel=3,
    )
    return True


def _compile_on_neuron(gm, example_inputs, compile_graph):
    """``compile_graph`` of a CPU graph moved to neuron (``cpu_graph.py``)."""
    device = torch.device("neuron", torch.neuron.current_device())
    moved = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))  # gm stays the eager fallback
    cpu_graph.move_graph_to(moved, device)
    indices = cpu_graph.cpu_input_indices(example_inputs)
    inputs = cpu_graph.example_inputs_on(gm, example_inputs, dict.fromkeys(indices, device))
    compiled = compile_graph(moved, inputs)
    return cpu_graph.with_inputs_on(compiled, indices, device)


def _with_cpu_autocopy(gm, to_copy: dict[int, torch.device], example_inputs, compile_graph):
    """``compile_graph(gm, example_inputs)``, with the CPU inputs in ``to_copy``
    copied to neuron before each call (see the module docstring)."""
    if not to_copy:
        return compile_graph(gm, example_inputs)
    inputs = cpu_graph.example_inputs_on(gm, example_inputs, to_copy)
    compiled = compile_graph(gm, inputs)

    def run(*args):
        args = list(args)
        for i, device in to_copy.items():
            args[i] = args[i].to(device, non_blocking=True)
        return compiled(*args)

    return run


def _not_rerun_because(error: NEFFExecutionError, fallback: FallbackPolicy) -> str | None:
    """Why a failed call is not run eagerly instead, if it is not."""
    if not fallback.allowed:
        return (
            f"fallback execution is off ({fallback.source}); to run a failed call "
            f"eagerly, {fallback.to_change}"
        )
    if error.writes_inputs:
        return (
            "the graph writes into its inputs, and the steps that ran before the failure "
            "may have written them already (an eager re-run would apply those writes twice)"
        )
    return None


def _with_execution_fallback(compiled, gm: torch.fx.GraphModule, fallback: FallbackPolicy):
    """``compiled``, with a call whose program fails on the device run eagerly
    (``gm.forward``) instead: TorchNeuron's fallback execution (module docstring).

    If the eager run fails too (a bad index fails either way), its error is raised,
    with the NEFFExecutionError as its context (both are in the traceback)."""

    @functools.wraps(compiled)
    def run(*args):
        try:
            return compiled(*args)
        except NEFFExecutionError as e:
            reason = _not_rerun_because(e, fallback)
            if reason is not None:
                e.args = (f"{e.args[0]}\nNot run eagerly instead: {reason}.",)
                raise
            from torch._dynamo.utils import counters  # lazy: Dynamo (module docstring)

            counters["neuron"]["execution_fallbacks"] += 1
            warnings.warn(
                f"{str(e).splitlines()[0]}\n{e.graph} runs eagerly instead for this call "
                f"(fallback execution is on: {fallback.source}; to raise NEFFExecutionError, "
                f"{fallback.to_change})",
                stacklevel=2,
            )
            return gm.forward(*args)

    return run


def _config_patches(mode: str | None, options: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Inductor's config patches for ``mode`` and ``options``, and whether graphs
    are captured and replayed (``triton.cudagraphs``, which mode="reduce-overhead"
    sets: CUDA graph trees are CUDA's, neuron captures graphs itself, see
    captured_call.py)."""
    from torch._inductor import list_mode_options  # lazy: Inductor (module docstring)

    # Random ops as in eager mode (module docstring); an option may turn it off.
    patches: dict[str, Any] = {"fallback_random": True}
    if mode and mode != "default":
        patches.update(list_mode_options(mode))
    patches.update({k: v for k, v in options.items() if k not in _NEURON_OPTIONS})
    captures = bool(patches.pop("triton.cudagraphs", False))
    return patches, captures


def _dynamo_control_flow() -> tuple[type[BaseException], ...]:
    """What a backend must raise to Dynamo unchanged (``call_user_compiler`` in
    torch/_dynamo/output_graph.py re-raises them): a restart of its analysis (e.g.
    ``TensorifyScalarRestartAnalysis``, AOTAutograd asking Dynamo to specialize a float
    argument it could not trace as a tensor — a float passed to ``clamp``, ``full`` or
    ``**`` on the call that made it dynamic), a request to skip the frame, a shortened
    traceback, and ``IndexError`` (the user's dim out of range stays an IndexError).
    None of them is a failure to compile: not a NEFFCompilationError, no fallback."""
    # lazy: Dynamo (module docstring)
    from torch._dynamo.exc import RestartAnalysis, ShortenTraceback, SkipFrame

    return (RestartAnalysis, ShortenTraceback, SkipFrame, IndexError)


def neuron_backend(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    mode: str | None = None,
    options: dict[str, Any] | None = None,
):
    """The ``neuron`` compile backend (see the module docstring)."""
    # lazy: Inductor, and inductor_device imports it (module docstring)
    from torch._inductor.compile_fx import compile_fx

    from .inductor_device import register

    options = dict(options or {})
    fallback = fallback_policy(options)
    register()
    timer = metrics.GraphTimer(gm, options.get("model_name") or get_model_name())
    patches, captures = _config_patches(mode, options)
    compile_kwargs: dict[str, Any] = {}
    cache_patch = contextlib.nullcontext()
    if captures:
        from .captured_call import capturing_inner_compile  # lazy: imports Inductor

        compile_kwargs["inner_compile"] = capturing_inner_compile
        # A graph from AOTAutograd's cache skips inner_compile: the capture
        # would be lost on a warm start (Inductor's FX graph cache still serves).
        cache_patch = torch._functorch.config.patch(enable_autograd_cache=False)
    on_cpu = cpu_graph.runs_on_cpu(gm, example_inputs)
    if on_cpu:
        to_copy = dict.fromkeys(cpu_graph.cpu_input_indices(example_inputs), None)
    else:
        to_copy = _cpu_inputs_to_copy(gm, example_inputs)
    if _autocopy_refused(to_copy, fallback):
        timer.finish(fell_back=True)
        return gm.forward

    def compile_graph(graph, inputs):
        return compile_fx(graph, inputs, config_patches=patches, **compile_kwargs)

    try:
        with cache_patch:
            if on_cpu:
                compiled = _compile_on_neuron(gm, example_inputs, compile_graph)
            else:
                compiled = _with_cpu_autocopy(gm, to_copy, example_inputs, compile_graph)
    except _dynamo_control_flow():
        raise
    except Exception as e:
        if not fallback.allowed:
            raise NEFFCompilationError(
                f"neuron: {timer.record.graph_name} could not be compiled: "
                f"{type(e).__name__}: {e}\nFallback execution is off ({fallback.source}); "
                f"to run the graph eagerly instead, {fallback.to_change}"
            ) from e
        warnings.warn(
            f"neuron: {timer.record.graph_name} could not be compiled and runs eagerly instead "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); fallback "
            f"execution is on ({fallback.source}); to raise instead, {fallback.to_change}",
            stacklevel=2,
        )
        timer.finish(fell_back=True)
        return gm.forward
    timer.finish(fell_back=False)
    return _with_execution_fallback(compiled, gm, fallback)
