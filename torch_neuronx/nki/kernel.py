"""NKI kernels: ``@nki.jit``, launch grids, the trace cache, and running a
traced kernel on neuron tensors (one work item on the current stream), on CPU
tensors and on NumPy arrays (on the calling thread).
"""

from __future__ import annotations

import functools
import gc
import inspect
import itertools
import math
import os
import threading
from dataclasses import dataclass, field

import numpy as np

from . import dtypes as dt
from . import trace_state
from .errors import NKIError
from .kernel_profile import KernelProfile, default_target
from .nki_object import NKIObject, field_values
from .trace import Trace
from .trace_state import HBM, error
from .typing import TensorSpec, is_mutable_annotation
from .view import View


@dataclass
class _ArgInfo:
    kind: str  # "tensor" or "const"
    shape: tuple = ()
    dtype: dt.DType | None = None
    strides: tuple = ()


@dataclass
class CompiledKernel:
    """A traced kernel: its simulator program and what its results are."""

    name: str
    program: object  # torch_neuronx._C._NkiProgram
    num_args: int
    outputs: list  # (shape, DType) per result buffer
    prints: list  # (prefix, constant, print index)
    result: object  # the kernel's return structure; ("out", k) / ("arg", k) leaves
    trace_locs: list = field(default_factory=list)
    written: tuple = ()  # positions (among the tensor arguments) the kernel writes
    location_names: list = field(default_factory=list)  # "file:line (kernel)", for device errors
    # Run-time loops or branches (control_flow.py): a host run's profile
    # (run_profile) times the iterations it took; the static one, one
    # iteration of a loop whose bound is read at run time.
    dynamic: bool = False
    run_profile: KernelProfile | None = None
    _profiles: dict = field(default_factory=dict)

    def profile(self, target: str | None = None) -> KernelProfile:
        """The cost model's estimate on ``target`` (a name of
        ``hardware_targets()``; an unknown one raises ValueError), by default
        ``default_target()``."""
        target = target or default_target()
        p = self._profiles.get(target)
        if p is None:
            p = KernelProfile.from_dict(
                self.name, target, self.program.profile(target), self.program.num_instructions
            )
            self._profiles[target] = p
        return p


def _c():
    from .. import _C

    return _C


class Kernel:
    """A function decorated with ``@nki.jit``: call it on neuron tensors
    (``kernel(a, b)``), with a launch grid (``kernel[2, 3](a, b)``), or on
    NumPy arrays."""

    def __init__(self, fn, *, mode: str = "auto", **options):
        if isinstance(fn, Kernel):
            fn = fn.fn
        self.fn = fn
        self.mode = mode
        self.options = options
        self._cache: dict = {}
        self._lock = threading.Lock()
        self.last_profile: KernelProfile | None = None
        functools.update_wrapper(self, fn)
        # Made here, before any torch.compile region: see WrappedKernel.
        self.torch_op = WrappedKernel(self)

    def __repr__(self) -> str:
        return f"<nki kernel {self.fn.__qualname__}>"

    # A kernel is equal only to itself (it holds its traces): that makes it
    # a constant torch.compile can guard on (torch_ops.py).
    def __eq__(self, other) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __getitem__(self, grid) -> GridLaunch:
        return GridLaunch(self, _grid_tuple(grid))

    def __call__(self, *args, **kwargs):
        return launch(self, (), args, kwargs)


class GridLaunch:
    """``kernel[g0, g1]``: a kernel bound to an SPMD launch grid."""

    def __init__(self, kernel: Kernel, grid: tuple):
        self.kernel = kernel
        self.grid = grid

    def __call__(self, *args, **kwargs):
        return launch(self.kernel, self.grid, args, kwargs)

    def __repr__(self) -> str:
        return f"{self.kernel!r}[{', '.join(map(str, self.grid))}]"


# torch_ops._call, set when torch_ops is imported (it needs torch).
_call_wrapped = None


class WrappedKernel:
    """``wrap_nki(kernel)``: the kernel called as PyTorch operators
    (torch_ops.py). ``wrapped(*args)`` launches it without a grid,
    ``wrapped[grid]`` is a callable launching it with that grid.

    Every kernel makes its own when it is created, and ``wrap_nki`` returns
    that one: under torch.compile, Dynamo meets an object that existed
    before the compiled region (it can trace its methods and treat the
    kernel as a constant); ``wrapped[grid]`` is a functools.partial, which
    Dynamo understands when the grid is computed inside the region."""

    def __init__(self, kernel: Kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        return functools.partial(_call_wrapped, self.kernel, _grid_tuple(grid))

    def __call__(self, *args, **kwargs):
        return _call_wrapped(self.kernel, (), *args, **kwargs)

    def __repr__(self) -> str:
        return f"wrap_nki({self.kernel!r})"


def _grid_tuple(grid) -> tuple:
    from .grid import grid_sizes

    return grid_sizes(grid)


def as_kernel(k) -> tuple[Kernel, tuple]:
    if isinstance(k, GridLaunch):
        return k.kernel, k.grid
    if isinstance(k, Kernel):
        return k, ()
    if callable(k):
        return Kernel(k), ()
    raise TypeError(f"expected an NKI kernel, got {type(k).__name__}")


# Arguments --------------------------------------------------------------------
def _is_torch_tensor(x) -> bool:
    return (
        type(x).__module__.startswith("torch") and hasattr(x, "data_ptr") and hasattr(x, "stride")
    )


def _describe(x) -> _ArgInfo:
    if isinstance(x, np.ndarray):
        item = x.dtype.itemsize
        if any(s % item for s in x.strides) or any(s < 0 for s in x.strides):
            raise NKIError("NumPy arguments need non-negative strides in whole elements")
        return _ArgInfo(
            "tensor", tuple(x.shape), dt.as_dtype(x.dtype), tuple(s // item for s in x.strides)
        )
    if _is_torch_tensor(x):
        if x.is_sparse or x.layout.__repr__() != "torch.strided":
            raise NKIError("NKI kernels take strided (dense) tensors")
        return _ArgInfo("tensor", tuple(x.shape), _torch_nki_dtype(x), tuple(x.stride()))
    if isinstance(x, TensorSpec):
        shape = tuple(x.shape)
        strides, acc = [], 1
        for s in reversed(shape):
            strides.append(acc)
            acc *= s
        return _ArgInfo("tensor", shape, x.dtype, tuple(reversed(strides)))
    return _ArgInfo("const")


def _torch_nki_dtype(x) -> dt.DType:
    """A torch tensor's NKI type: its dtype's, or an MX packed type it holds
    in containers (torch has none): ``t.nki_dtype = nl.float8_e4m3fn_x4`` on
    a uint32 (fp8 x4) or uint16 (fp4 x4) tensor, as kernel results of those
    types come back."""
    d = dt.as_dtype(x.dtype)
    tag = getattr(x, "nki_dtype", None)
    if tag is None:
        return d
    tag = dt.as_dtype(tag)
    if tag not in dt.MX_PACKED or d.itemsize != tag.itemsize or d.is_float:
        raise NKIError(
            f"a tensor of {d.name} tagged nki_dtype={tag.name}: only MX packed types are "
            "held in containers (uint32 for fp8 x4, uint16 for fp4 x4)"
        )
    return tag


def _tag_results(outs, ck) -> None:
    for o, (_, d) in zip(outs, ck.outputs, strict=False):
        if d in dt.MX_PACKED:
            o.nki_dtype = d


def _const_key(x):
    if isinstance(x, NKIObject):
        # Configurations are often dataclasses, which are unhashable: key them
        # by their fields, so an equal one reuses the trace, a changed one
        # re-traces, and no key outlives its object through a reused id().
        return ("nki_object", type(x), _fields_key(x))
    try:
        hash(x)
        return ("v", type(x).__name__, x)
    except TypeError:
        return ("id", id(x))


def _fields_key(obj: NKIObject) -> tuple:
    def value_key(v):
        if isinstance(v, (list, tuple)):
            return (type(v).__name__, tuple(value_key(e) for e in v))
        if isinstance(v, dict):
            return ("dict", tuple((k, value_key(e)) for k, e in v.items()))
        return _const_key(v)

    return tuple((name, value_key(v)) for name, v in field_values(obj).items())


def _param_mutability(fn, names) -> dict:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return {}
    out = {}
    for n in names:
        p = sig.parameters.get(n)
        out[n] = p is not None and is_mutable_annotation(p.annotation)
    return out


# Tracing ------------------------------------------------------------------
def trace_kernel(kernel: Kernel, grid: tuple, args: tuple, kwargs: dict) -> CompiledKernel:
    fn = kernel.fn
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{fn.__qualname__}: {e}") from None
    bound.apply_defaults()
    # Tiles' operators (`a + b`, `t[...] = v`) are the language's functions,
    # which it hands to View when it loads (view.use_language).
    from . import language  # noqa: F401
    from .logical_core import Turnstile, is_lnc_launch

    lnc = 2 if is_lnc_launch(grid) else 1
    t = Trace(grid, lnc=lnc)
    prev = getattr(trace_state.state, "trace", None)
    trace_state.state.trace = t
    try:
        views = {}
        arg_order = []
        for name, value in bound.arguments.items():
            info = _describe(value)
            if info.kind == "tensor":
                v = t.argument(info.dtype, info.shape, info.strides, name)
                views[name] = v
                arg_order.append(name)
        for n, v in views.items():
            bound.arguments[n] = v
        result = None
        if lnc > 1:
            # LNC=2: the two physical cores' programs, traced in turn on
            # their own threads and interleaved at their barriers.
            result = Turnstile(t, lnc).run(fn, bound.args, bound.kwargs)[0]
        else:
            ids = list(itertools.product(*(range(g) for g in grid))) if grid else [()]
            for k, pid in enumerate(ids):
                t.program_id = pid
                t.shared_counter = 0
                ret = fn(*bound.args, **bound.kwargs)
                if k == 0:
                    result = ret
        outputs: list = []
        result_shapes: dict = {}
        structure = _result_structure(result, t, views, arg_order, outputs, result_shapes)
        next_ext = t.externals
        for b in outputs:
            b.external = next_ext
            b.kind = "output"
            next_ext += 1
        prints = []
        for prefix, const, buf in t.prints:
            if buf is None:
                prints.append((prefix, const, None))
            else:
                buf.external = next_ext
                prints.append((prefix, None, (next_ext, buf.shape, buf.dtype)))
                next_ext += 1
        from .control_flow import finish_trace

        finish_trace(t)
        t.interleave_cores()
        program = _build(t, next_ext)
    finally:
        trace_state.state.trace = prev
    return CompiledKernel(
        name=fn.__name__,
        program=program,
        num_args=t.externals,
        outputs=[(result_shapes[b], b.dtype) for b in outputs],
        prints=prints,
        result=structure,
        trace_locs=t.locs,
        written=tuple(k for k, n in enumerate(arg_order) if views[n].buf.written),
        dynamic=bool(getattr(t, "control_flow_blocks", None)),
    )


def _is_whole_buffer(v: View) -> bool:
    """Whether ``v`` is all of its buffer in order, in any shape: the buffer
    itself or a reshape of it (what a result may be)."""
    if v.offset != 0 or v.dyn is not None or math.prod(v.shape) != v.buf.elements:
        return False
    return v.is_row_major()


def _result_structure(ret, t: Trace, views, arg_order, outputs, shapes):
    """The kernel's return value with each tensor replaced by ("out", k) /
    ("arg", k); fills ``outputs`` with the result buffers and ``shapes`` with
    the shape each is returned in."""
    if ret is None:
        return None
    if isinstance(ret, View):
        b = ret.buf
        if b.kind == "input":
            return ("arg", arg_order.index(next(n for n, v in views.items() if v.buf is b)))
        if b.space != HBM:
            raise error(
                "a kernel returns tensors in HBM (allocate its results with "
                "nl.ndarray(..., buffer=nl.shared_hbm)), not an on-chip tile",
                "result",
            )
        # A reshape of a result buffer is the same bytes in another shape:
        # the result tensor is allocated in that shape.
        if not _is_whole_buffer(ret):
            raise error(
                "a kernel returns whole tensors (or reshapes of them), not views of parts",
                "result",
            )
        if shapes.setdefault(b, ret.shape) != ret.shape:
            raise error(
                f"a kernel returns one tensor in two shapes, {list(shapes[b])} and "
                f"{list(ret.shape)}: return it once",
                "result",
            )
        if b not in outputs:
            outputs.append(b)
        return ("out", outputs.index(b))
    if isinstance(ret, (tuple, list)):
        return type(ret)(_result_structure(r, t, views, arg_order, outputs, shapes) for r in ret)
    if isinstance(ret, dict):
        return {
            k: _result_structure(v, t, views, arg_order, outputs, shapes) for k, v in ret.items()
        }
    return ("const", ret)


def _build(t: Trace, externals: int):
    bw = []
    for b in t.buffers:
        space = b.space
        if space == HBM:
            parts, per = 0, 0
        else:
            parts = b.shape[0]
            per = (b.elements // max(parts, 1)) * b.dtype.itemsize
        bw += [
            space,
            b.dtype.code,
            b.elements,
            parts,
            per,
            b.external,
            int(b.initialized),
            b.loc if b.loc is not None else -1,
            b.core,
        ]
    C = _c()
    try:
        return C._NkiProgram(
            np.asarray(bw, dtype=np.int64).reshape(-1),
            np.asarray(t.words, dtype=np.int64).reshape(-1),
            np.asarray(t.imms, dtype=np.float64).reshape(-1),
            externals,
        )
    except C._NkiProgramError as e:
        raise _program_error(e, t) from None


def _program_error(e, t: Trace) -> NKIError:
    msg = str(e)
    import re

    def buf(m):
        k = int(m.group(1))
        return t.buffers[k].describe(t) if 0 <= k < len(t.buffers) else f"buffer {k}"

    def loc(m):
        k = int(m.group(1))
        if 0 <= k < len(t.locs):
            f, line, _ = t.locs[k]
            return f"{os.path.basename(f)}:{line}"
        return "?"

    msg = re.sub(r"\{buffer:(-?\d+)\}", buf, msg)
    msg = re.sub(r"\{loc:(-?\d+)\}", loc, msg)
    limit = None
    for key, name in (
        ("capacity", None),
        ("never written", "uninitialized-read"),
        ("reaches elements", "out-of-bounds"),
    ):
        if key in msg:
            limit = name or ("sbuf-capacity" if "SBUF" in msg else "psum-capacity")
    lid = getattr(e, "loc", -1)
    if 0 <= lid < len(t.locs):
        f, line, _ = t.locs[lid]
        return NKIError(msg, filename=f, lineno=line, limit=limit)
    return NKIError(msg, limit=limit)


def _run_error(e, ck: CompiledKernel) -> NKIError:
    """An error only the data revealed while the program ran (a tensor
    indirection offset out of range), at the kernel line that made it."""
    lid = getattr(e, "loc", -1)
    if 0 <= lid < len(ck.trace_locs):
        f, line, _ = ck.trace_locs[lid]
        return NKIError(f"{ck.name}: {e}", filename=f, lineno=line, limit="out-of-bounds")
    return NKIError(f"{ck.name}: {e}", limit="out-of-bounds")


def _run_host(ck: CompiledKernel, addrs) -> None:
    C = _c()
    try:
        if ck.dynamic:
            target = default_target()
            d = ck.program.run_host_profiled(addrs, target)
            ck.run_profile = KernelProfile.from_dict(
                ck.name, target, d, ck.program.num_instructions
            )
        else:
            ck.program.run_host(addrs)
    except C._NkiProgramError as e:
        raise _run_error(e, ck) from None


def _location_names(ck: CompiledKernel) -> list:
    """``file:line (kernel)`` by location id, for device errors."""
    if not ck.location_names:
        ck.location_names = [
            f"{os.path.basename(f)}:{line} ({ck.name})" for f, line, _ in ck.trace_locs
        ]
    return ck.location_names


# Launching ----------------------------------------------------------------
def _arg_key(x):
    info = _describe(x)
    if info.kind == "tensor":
        return ("t", info.shape, info.dtype.code, info.strides)
    return _const_key(x)


def _signature_key(grid, args, kwargs):
    return (
        grid,
        tuple(_arg_key(x) for x in args),
        tuple((name, _arg_key(kwargs[name])) for name in sorted(kwargs)),
    )


def compiled_for(kernel: Kernel, grid: tuple, args: tuple, kwargs: dict) -> CompiledKernel:
    """The kernel's trace for these arguments (cached)."""
    key = _signature_key(grid, args, kwargs)
    with kernel._lock:
        ck = kernel._cache.get(key)
    if ck is None:
        # A trace makes many small objects that all live until it ends: the
        # cycle collector would rescan them again and again.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            ck = trace_kernel(kernel, grid, args, kwargs)
        finally:
            if gc_was_enabled:
                gc.enable()
        with kernel._lock:
            kernel._cache[key] = ck
    return ck


def launch(kernel: Kernel, grid: tuple, args: tuple, kwargs: dict, outs=None):
    """Runs the kernel; `outs`: tensors to write its results into (else new)."""
    # A kernel called from inside another kernel is inlined (sub-kernels).
    if getattr(trace_state.state, "trace", None) is not None:
        return kernel.fn(*args, **kwargs)
    ck = compiled_for(kernel, grid, args, kwargs)
    kernel.last_profile = ck.profile()
    # Bind in the kernel's parameter order (keyword tensors included).
    bound = inspect.signature(kernel.fn).bind(*args, **kwargs)
    bound.apply_defaults()
    tensors = [v for v in bound.arguments.values() if _describe(v).kind == "tensor"]
    if any(isinstance(x, TensorSpec) for x in tensors):
        raise NKIError(
            "tensor specs (nt.tensor[...]) have no data to run on; use "
            "nki.benchmark or torch_neuronx.nki.estimate for them"
        )
    if tensors and all(_is_torch_tensor(x) for x in tensors):
        if outs is None and any(_is_functional(x) for x in tensors):
            # Called directly in an nki_op's body while AOTAutograd traces it
            # (torch_ops.nki_op): launched through the torch ops, as
            # wrap_nki(kernel) would be, so that the launch is in the graph
            # (_call_wrapped: set by torch_ops, which defines nki_op).
            return _call_wrapped(kernel, grid, *args, **kwargs)
        if any(_is_fake(x) for x in tensors):
            return _fake_results(ck, tensors) if outs is None else None
        return _with_run_profile(kernel, ck, lambda: _run_torch(ck, tensors, outs))
    if all(isinstance(x, np.ndarray) for x in tensors):
        return _with_run_profile(kernel, ck, lambda: _run_numpy(ck, tensors))
    raise NKIError(
        "an NKI kernel takes either torch tensors (all on one device) or NumPy arrays, not a mix"
    )


def _with_run_profile(kernel: Kernel, ck: CompiledKernel, run):
    """Runs; a host run of a kernel with run-time loops leaves the profile
    of the iterations it executed in ``kernel.last_profile``."""
    ck.run_profile = None
    out = run()
    if ck.run_profile is not None:
        kernel.last_profile = ck.run_profile
    return out


def _is_functional(t) -> bool:
    import torch
    from torch._subclasses.functional_tensor import FunctionalTensor

    return isinstance(t, FunctionalTensor) or torch._is_functional_tensor(t)


def _is_fake(t) -> bool:
    from torch._subclasses.fake_tensor import is_fake

    return t.device.type == "meta" or is_fake(t)


def _fake_results(ck: CompiledKernel, tensors):
    """Results of the traced shapes without running (fake tensors, meta)."""
    import torch

    device = tensors[0].device
    outs = [torch.empty(shape, dtype=dt.torch_dtype(d), device=device) for shape, d in ck.outputs]
    _tag_results(outs, ck)
    return _unflatten(ck.result, outs, tensors)


def _unflatten(structure, outs, args):
    if structure is None:
        return None
    if (
        isinstance(structure, tuple)
        and len(structure) == 2
        and structure[0] in ("out", "arg", "const")
    ):
        kind, k = structure
        return outs[k] if kind == "out" else args[k] if kind == "arg" else k
    if isinstance(structure, (tuple, list)):
        return type(structure)(_unflatten(s, outs, args) for s in structure)
    if isinstance(structure, dict):
        return {k: _unflatten(v, outs, args) for k, v in structure.items()}
    return structure


def _run_numpy(ck: CompiledKernel, arrays):
    outs = [np.empty(shape, dtype=dt.numpy_dtype(d)) for shape, d in ck.outputs]
    prints = [
        np.empty(p[2][1], dtype=dt.numpy_dtype(p[2][2])) for p in ck.prints if p[2] is not None
    ]
    addrs = (
        [a.ctypes.data for a in arrays]
        + [o.ctypes.data for o in outs]
        + [p.ctypes.data for p in prints]
    )
    _run_host(ck, addrs)
    _show_prints(ck, prints)
    return _unflatten(ck.result, outs, arrays)


def _show_prints(ck, values):
    it = iter(values)
    for prefix, const, spec in ck.prints:
        print(prefix, const if spec is None else np.asarray(next(it)))


def _run_torch(ck: CompiledKernel, tensors, outs=None):
    import torch

    devices = {t.device for t in tensors}
    if len(devices) != 1:
        raise NKIError(
            f"an NKI kernel's tensors must be on one device, got {sorted(map(str, devices))}"
        )
    device = tensors[0].device
    if outs is None:
        outs = [
            torch.empty(shape, dtype=dt.torch_dtype(d), device=device) for shape, d in ck.outputs
        ]
        _tag_results(outs, ck)
    else:
        for o, (shape, d) in zip(outs, ck.outputs, strict=True):
            if (
                tuple(o.shape) != tuple(shape)
                or o.dtype != dt.torch_dtype(d)
                or (not o.is_contiguous())
                or o.device != device
            ):
                raise NKIError("an NKI result buffer does not match the kernel's result")
    prints = [
        torch.empty(p[2][1], dtype=dt.torch_dtype(p[2][2]), device=device)
        for p in ck.prints
        if p[2] is not None
    ]
    addrs = (
        [t.data_ptr() for t in tensors]
        + [o.data_ptr() for o in outs]
        + [p.data_ptr() for p in prints]
    )
    if device.type == "cpu":
        _run_host(ck, addrs)
    elif device.type == "neuron":
        label = f"nki::{ck.name}"
        _c()._note_executed(label)
        index = device.index if device.index is not None else torch.neuron.current_device()
        if torch.autograd.profiler._is_profiler_enabled:
            # The launch as a host event in the profile (a user scope: it
            # spans the queueing of the kernel's device item).
            with torch.autograd.profiler.record_function(label):
                ck.program.launch(addrs, index, label, _location_names(ck))
        else:
            ck.program.launch(addrs, index, label, _location_names(ck))
    else:
        raise NKIError(f"NKI kernels run on neuron (or CPU) tensors, not {device.type}")
    # Arguments written in place are modified tensors, as after an in-place
    # op: autograd's saved-tensor checks see the change.
    for k in ck.written:
        torch.autograd.graph.increment_version(tensors[k])
    if prints:
        _show_prints(
            ck,
            [
                p.cpu().float().numpy()
                if p.dtype not in (torch.int32, torch.bool)
                else p.cpu().numpy()
                for p in prints
            ],
        )
    return _unflatten(ck.result, outs, tensors)


def jit(func=None, *, mode: str = "auto", **kwargs):
    """``@nki.jit`` / ``@nki.jit(mode=...)``: makes an NKI kernel."""
    if func is None:
        return lambda f: Kernel(f, mode=mode, **kwargs)
    return Kernel(func, mode=mode, **kwargs)


def nki_jit(func=None, **kwargs):
    """``torch_neuronx.nki_jit``: the oldest torch entry point; its kernels
    write results into output arguments (as any kernel may)."""
    if func is None:
        return lambda f: Kernel(f, **kwargs)
    return Kernel(func, **kwargs)
