"""NKI kernels as PyTorch operators: ``wrap_nki`` and ``nki_op``.

``wrap_nki(kernel)(*args)`` / ``wrap_nki(kernel)[grid](*args)`` run a kernel
through one generic custom op, ``torch.ops.neuron_nki.call``: eager calls
launch the kernel as one work item; under ``torch.compile`` the call is an
opaque node of the graph (Dynamo does not trace the kernel, AOTAutograd sees
the op with its declared mutations) and runs as its own item of the
compiled program. Arguments the kernel writes (annotated
``nt.mutable_tensor`` or not: its trace says) are written in place.

``@nki_op("ns::name", mutates_args=...)`` makes a Python function that calls
kernels into a real custom op ``torch.ops.ns.name`` (``register_autograd``,
fake tensors, ``torch.compile(fullgraph=True)``): kernels called on fake
tensors return fake results of the shapes their trace gives, so the function
is its own fake implementation.
"""

from __future__ import annotations

import functools
import threading

import torch

from . import kernel as _kernel_module
from .kernel import (
    GridLaunch,
    Kernel,
    WrappedKernel,
    _param_mutability,
    _unflatten,
    as_kernel,
    compiled_for,
    launch,
)

# key -> (kernel, grid, template): what a neuron_nki::call node launches.
_LAUNCHES: dict = {}
_LOCK = threading.Lock()


def _template(kernel: Kernel, grid: tuple, args, kwargs):
    """Splits a call into its tensors (read-only, written) and the rest. A
    tensor is written when its parameter is annotated ``nt.mutable_tensor``
    or when the kernel's trace writes it (NKI-lib's output arguments)."""
    import inspect

    bound = inspect.signature(kernel.fn).bind(*args, **kwargs)
    bound.apply_defaults()  # as the trace binds them: same tensor order
    mutable = _param_mutability(kernel.fn, list(bound.arguments))
    # Traced with the arguments by name, as the launch traces them: one trace.
    written = set(compiled_for(kernel, grid, (), dict(bound.arguments)).written)
    inputs, mutated, template = [], [], {}
    k = -1
    for name, value in bound.arguments.items():
        if isinstance(value, torch.Tensor):
            k += 1
            if mutable.get(name) or k in written:
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


def _new_outputs(ck, tensors) -> list[torch.Tensor]:
    """Empty tensors for the kernel's new results (its shared_hbm arrays),
    on the device of its tensor arguments."""
    from . import dtypes as dt

    device = tensors[0].device if tensors else torch.device("cpu")
    return [torch.empty(shape, dtype=dt.torch_dtype(d), device=device) for shape, d in ck.outputs]


def _launch_into_new_outputs(key, inputs, mutated) -> list[torch.Tensor]:
    kernel, grid, template = _LAUNCHES[key]
    args = _fill(template, inputs, mutated)
    outs = _new_outputs(compiled_for(kernel, grid, (), args), inputs + mutated)
    launch(kernel, grid, (), args, outs=outs)
    return outs


# The ops return only the kernel's new results: an op's results must not
# alias its arguments. Arguments the kernel returns are put back into its
# result structure by the caller (call_wrapped), as the objects passed in.
@torch.library.custom_op("neuron_nki::call", mutates_args=())
def nki_call(key: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """A kernel without mutable arguments."""
    return _launch_into_new_outputs(key, inputs, [])


@nki_call.register_fake
def _nki_call_fake(key, inputs):
    kernel, grid, template = _LAUNCHES[key]
    return _new_outputs(compiled_for(kernel, grid, (), _fill(template, inputs, [])), inputs)


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


def call_wrapped(kernel: Kernel, grid: tuple, *args, **kwargs):
    """``wrap_nki(kernel)[grid](*args, **kwargs)``."""
    template, inputs, mutated = _template(kernel, grid, args, kwargs)
    key = _register(kernel, grid, template)
    filled = _fill(template, inputs, mutated)
    # The structure of the results: the trace knows it (cached).
    ck = compiled_for(kernel, grid, (), filled)
    if not mutated:
        new = torch.ops.neuron_nki.call(key, inputs)
    else:
        new = _new_outputs(ck, inputs + mutated)
        torch.ops.neuron_nki.call_mutating(key, inputs, mutated, new)
    if ck.result is None:
        # Under torch.compile a wrapped call's result must be tensors or
        # containers: a kernel without results gives () in eager mode too.
        return ()
    # A returned argument (`return y` for `y: nt.mutable_tensor`) is the
    # tensor the caller passed, as from a direct call: `out is y`.
    tensor_args = [v for v in filled.values() if isinstance(v, torch.Tensor)]
    return _unflatten(ck.result, list(new), tensor_args)


def _call_with_nones(kernel: Kernel, grid: tuple, nones: tuple, *args, **kwargs):
    """``call_wrapped`` with the arguments listed in ``nones`` (positions and
    keyword names) set back to None (see ``_call``)."""
    args = tuple(None if i in nones else a for i, a in enumerate(args))
    kwargs = {k: None if k in nones else v for k, v in kwargs.items()}
    return call_wrapped(kernel, grid, *args, **kwargs)


def _call(kernel: Kernel, grid: tuple, *args, **kwargs):
    """What ``wrap_nki(kernel)(*args)`` and ``wrap_nki(kernel)[grid](*args)``
    call. Under torch.compile Dynamo traces this (dont_skip_tracing) and hands
    ``_call_with_nones`` to AOTAutograd (nonstrict_trace), whose inputs must
    be tensors, numbers, strings or containers of them: a None argument
    (``bias=None``, common in kernels) crosses as 0, its position or name
    listed in ``nones``."""
    nones = tuple(i for i, a in enumerate(args) if a is None)
    nones += tuple(k for k, v in kwargs.items() if v is None)
    if nones:
        args = tuple(0 if a is None else a for a in args)
        kwargs = {k: 0 if v is None else v for k, v in kwargs.items()}
    return _call_with_nones(kernel, grid, nones, *args, **kwargs)


def wrap_nki(kernel):
    """Makes an NKI kernel callable as a PyTorch operator, eager and under
    ``torch.compile(fullgraph=True)``: ``wrap_nki(kernel)(a, b)``,
    ``wrap_nki(kernel)[grid](a, b)``."""
    if isinstance(kernel, WrappedKernel) or (
        isinstance(kernel, functools.partial) and kernel.func is _kernel_module._call_wrapped
    ):
        return kernel
    if isinstance(kernel, GridLaunch):
        return kernel.kernel.torch_op[kernel.grid]
    k, _ = as_kernel(kernel)
    return k.torch_op


def nki_op(name: str, *, mutates_args=(), device_types=None, schema=None):
    """``@nki_op("ns::name", mutates_args=...)``: a function calling NKI
    kernels becomes the custom op ``torch.ops.ns.name`` (torch.library's
    custom_op: register_autograd, register_fake, torch.compile). Kernels
    called on fake tensors give fake results of their traced shapes, so the
    function serves as its own fake implementation.

    Under ``torch.compile`` the op is traced through, as TorchNeuron does (a
    decomposition for AOTAutograd's functionalization): the graph holds the
    kernel launches of its body, not an opaque call, so the body's mutations
    are functionalized like any other (whatever the parameters are named)
    and the launches are steps of the compiled program. Autograd formulas
    registered with ``register_autograd`` still apply (autograd sees the op
    before the decomposition).

    Its results never alias its arguments (PyTorch's custom-op contract): a
    result that is an argument (a kernel's ``return b`` for a mutated ``b``)
    comes back as a copy of it, eager and compiled alike; the argument itself
    is written in place."""

    def decorate(fn):
        impl = _fresh_results(fn)
        op = torch.library.custom_op(
            name,
            mutates_args=mutates_args,
            device_types=device_types,
            # The schema of `fn` itself (impl's is *args, **kwargs).
            schema=schema or torch.library.infer_schema(fn, mutates_args=mutates_args),
        )(impl)
        op.register_fake(impl)
        from torch._subclasses.functional_tensor import FunctionalTensorMode

        op.register_torch_dispatch(FunctionalTensorMode, _traced_through(impl))
        return op

    return decorate


def _fresh_results(fn):
    """``fn`` with each result tensor that shares storage with an argument,
    or with an earlier result, replaced by a copy: what a custom op may
    return (torch.library checks it, and AOTAutograd relies on it)."""

    @functools.wraps(fn)
    def impl(*args, **kwargs):
        from torch.utils._pytree import tree_flatten, tree_map

        result = fn(*args, **kwargs)
        # After the call: functionalization gives a mutated argument new storage.
        seen = {
            _storage_key(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)
        }

        def fresh(t):
            if not isinstance(t, torch.Tensor):
                return t
            key = _storage_key(t)
            if key in seen:
                t = t.clone()
                key = _storage_key(t)
            seen.add(key)
            return t

        return tree_map(fresh, result)

    return impl


def _storage_key(t: torch.Tensor):
    return t.untyped_storage()._cdata


def _traced_through(impl):
    """The op under FunctionalTensorMode (AOTAutograd, torch.compile): its
    body, run in the mode, instead of the op — as torch.library's triton_op
    does for Triton kernels. Without it the op stays one opaque node whose
    mutations go through auto_functionalized, which cannot hold a parameter
    named ``mode`` (upstream's redirect_to_mode takes ``mode`` itself) and
    which keeps the launches out of the compiled program's view."""

    def decompose(mode, op, types, args, kwargs):
        from torch._subclasses.fake_tensor import FakeTensor
        from torch._subclasses.functional_tensor import FunctionalTensor

        # A tensor subclass the body may not know how to handle: let the
        # op go through the mode's ordinary path.
        if any(
            not issubclass(t, FakeTensor) and t not in (torch.Tensor, FunctionalTensor)
            for t in types
        ):
            return NotImplemented
        with mode:
            return impl(*args, **kwargs)

    return decompose


def _dynamo_support() -> None:
    # Dynamo skips torch_neuronx's files (compile/registration.py says why). Making a
    # wrapped kernel, `wrap_nki(kernel)[grid]`, is plain Python Dynamo can
    # trace (dont_skip_tracing), so it may happen inside a compiled function
    # (a grid computed from shapes). The call itself is traced by AOTAutograd
    # (nonstrict_trace), where it meets the neuron_nki ops; the kernel object
    # is a constant of the graph (register_constant: guarded by identity).
    try:
        from torch._dynamo import dont_skip_tracing, nonstrict_trace
        from torch.utils._pytree import register_constant
    except ImportError:  # pragma: no cover - older torch
        return
    global _call, _call_with_nones, wrap_nki
    register_constant(Kernel)
    _call_with_nones = nonstrict_trace(_call_with_nones)
    _call = dont_skip_tracing(_call)
    WrappedKernel.__getitem__ = dont_skip_tracing(WrappedKernel.__getitem__)
    WrappedKernel.__call__ = dont_skip_tracing(WrappedKernel.__call__)
    wrap_nki = dont_skip_tracing(wrap_nki)


_dynamo_support()
_kernel_module._call_wrapped = _call
