"""NKI kernels as PyTorch operators: ``wrap_nki`` and ``nki_op``.

``wrap_nki(kernel)(*args)`` / ``wrap_nki(kernel)[grid](*args)`` run a kernel
through one generic custom op, ``torch.ops.neuron_nki.call``: eager calls
launch the kernel as one work item; under ``torch.compile`` the call is an
opaque node of the graph (Dynamo does not trace the kernel, AOTAutograd sees
the op with its declared mutations) and runs as its own item of the
compiled program. Arguments annotated ``nt.mutable_tensor`` are written in
place.

``@nki_op("ns::name", mutates_args=...)`` makes a Python function that calls
kernels into a real custom op ``torch.ops.ns.name`` (``register_autograd``,
fake tensors, ``torch.compile(fullgraph=True)``): kernels called on fake
tensors return fake results of the shapes their trace gives, so the function
is its own fake implementation.
"""

from __future__ import annotations

import threading

import torch

from .errors import NKIError
from .kernel import GridLaunch, Kernel, _grid_tuple, _param_mutability, as_kernel, launch

# key -> (kernel, grid, template): what a neuron_nki::call node launches.
_LAUNCHES: dict = {}
_LOCK = threading.Lock()


def _template(kernel: Kernel, args, kwargs):
    """Splits a call into its tensors (read-only, written) and the rest."""
    import inspect

    bound = inspect.signature(kernel.fn).bind(*args, **kwargs)
    mutable = _param_mutability(kernel.fn, list(bound.arguments))
    inputs, mutated, template = [], [], {}
    for name, value in bound.arguments.items():
        if isinstance(value, torch.Tensor):
            if mutable.get(name):
                template[name] = ("__mutated__", len(mutated))
                mutated.append(value)
            else:
                template[name] = ("__input__", len(inputs))
                inputs.append(value)
        else:
            template[name] = value
    return template, inputs, mutated


def _fill(template: dict, inputs, mutated) -> dict:
    out = {}
    for name, v in template.items():
        if isinstance(v, tuple) and len(v) == 2 and v[0] in ("__input__", "__mutated__"):
            out[name] = inputs[v[1]] if v[0] == "__input__" else mutated[v[1]]
        else:
            out[name] = v
    return out


def _register(kernel: Kernel, grid: tuple, template: dict) -> str:
    fn = kernel.fn
    key = f"{fn.__module__}.{fn.__qualname__}{list(grid)}{template!r}"
    with _LOCK:
        if key not in _LAUNCHES:
            _LAUNCHES[key] = (kernel, grid, template)
    return key


def _flat_results(result) -> list:
    if result is None:
        return []
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)):
        out = []
        for r in result:
            out.extend(_flat_results(r))
        return out
    raise NKIError("a kernel wrapped with wrap_nki returns tensors (or tuples of them)")


@torch.library.custom_op("neuron_nki::call", mutates_args=())
def nki_call(key: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """A kernel without mutable arguments: its results are new tensors."""
    kernel, grid, template = _LAUNCHES[key]
    result = launch(kernel, grid, (), _fill(template, inputs, []))
    # An op's results must not alias its arguments.
    return [r.clone() if any(r is t for t in inputs) else r for r in _flat_results(result)]


@nki_call.register_fake
def _nki_call_fake(key, inputs):
    kernel, grid, template = _LAUNCHES[key]
    result = launch(kernel, grid, (), _fill(template, inputs, []))
    return [r.clone() if any(r is t for t in inputs) else r for r in _flat_results(result)]


@torch.library.custom_op("neuron_nki::call_mutating", mutates_args=("mutated", "outs"))
def nki_call_mutating(
    key: str, inputs: list[torch.Tensor], mutated: list[torch.Tensor], outs: list[torch.Tensor]
) -> None:
    """A kernel that writes arguments in place: its results go to `outs`
    (allocated by the caller; a mutating op cannot return a list)."""
    kernel, grid, template = _LAUNCHES[key]
    launch(kernel, grid, (), _fill(template, inputs, mutated), outs=outs)


@nki_call_mutating.register_fake
def _nki_call_mutating_fake(key, inputs, mutated, outs):
    return None


class WrappedKernel:
    """``wrap_nki(kernel)``: the kernel as a PyTorch operator call."""

    def __init__(self, kernel, grid: tuple = ()):
        k, g = as_kernel(kernel)
        self.kernel = k
        self.grid = grid or g

    def __getitem__(self, grid) -> WrappedKernel:
        return WrappedKernel(self.kernel, _grid_tuple(grid))

    def __repr__(self) -> str:
        return f"wrap_nki({self.kernel!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, WrappedKernel) and (self.kernel, self.grid) == (
            other.kernel,
            other.grid,
        )

    def __hash__(self) -> int:
        return hash((id(self.kernel), self.grid))

    def __call__(self, *args, **kwargs):
        return _call_wrapped(self, args, kwargs)


def _call_wrapped(wrapped: WrappedKernel, args, kwargs):
    from . import dtypes as dt
    from .kernel import compiled_for

    template, inputs, mutated = _template(wrapped.kernel, args, kwargs)
    key = _register(wrapped.kernel, wrapped.grid, template)
    # The structure of the results: the trace knows it (cached).
    ck = compiled_for(wrapped.kernel, wrapped.grid, (), _fill(template, inputs, mutated))
    if any(s[0] == "arg" for s in _leaves(ck.result)):
        raise NKIError("a kernel called through wrap_nki returns new tensors, not its arguments")
    if not mutated:
        flat = torch.ops.neuron_nki.call(key, inputs)
    else:
        device = (inputs + mutated)[0].device
        flat = [
            torch.empty(shape, dtype=dt.torch_dtype(d), device=device) for shape, d in ck.outputs
        ]
        torch.ops.neuron_nki.call_mutating(key, inputs, mutated, flat)
    if ck.result is None:
        # Under torch.compile a wrapped call's result must be tensors or
        # containers: a kernel without results gives () in eager mode too.
        return ()
    return _unflatten_results(ck.result, list(flat))


def _leaves(structure):
    if isinstance(structure, tuple) and len(structure) == 2 and isinstance(structure[0], str):
        yield structure
    elif isinstance(structure, (tuple, list)):
        for s in structure:
            yield from _leaves(s)


def _unflatten_results(structure, flat):
    from .kernel import _unflatten

    return _unflatten(structure, flat, [])


def wrap_nki(kernel) -> WrappedKernel:
    """Makes an NKI kernel callable as a PyTorch operator, eager and under
    ``torch.compile(fullgraph=True)``: ``wrap_nki(kernel)(a, b)``,
    ``wrap_nki(kernel)[grid](a, b)``."""
    if isinstance(kernel, WrappedKernel):
        return kernel
    if isinstance(kernel, GridLaunch):
        return WrappedKernel(kernel.kernel, kernel.grid)
    return WrappedKernel(kernel)


def nki_op(name: str, *, mutates_args=(), device_types=None, schema=None):
    """``@nki_op("ns::name", mutates_args=...)``: a function calling NKI
    kernels becomes the custom op ``torch.ops.ns.name`` (torch.library's
    custom_op: register_autograd, register_fake, torch.compile). Kernels
    called on fake tensors give fake results of their traced shapes, so the
    function serves as its own fake implementation."""

    def decorate(fn):
        op = torch.library.custom_op(
            name, mutates_args=mutates_args, device_types=device_types, schema=schema
        )(fn)
        op.register_fake(fn)
        return op

    return decorate


def _dynamo_support() -> None:
    # Dynamo skips torch_neuronx's files; a wrapped kernel's call is traced
    # by AOTAutograd instead (it meets the neuron_nki::call op there).
    try:
        from torch._dynamo import nonstrict_trace
        from torch.utils._pytree import register_constant
    except ImportError:  # pragma: no cover - older torch
        return
    register_constant(WrappedKernel)
    WrappedKernel.__call__ = nonstrict_trace(WrappedKernel.__call__)


_dynamo_support()
