#!/usr/bin/env python3
"""Run AWS NKI-lib's integration-test cases on the simulated NeuronCore.

NKI-lib (github.com/aws-neuron/nki-library, Apache-2.0) is AWS's library of
production NKI kernels (attention, MLP, MoE, QKV, RoPE, norms, ...). Its
integration tests drive real Trainium hosts through a harness we cannot run,
but each test says everything a kernel run needs: the kernel, its seeded
inputs, the LNC (logical cores) it is launched with, the ``*_torch.py``
reference that computes the expected outputs, and the tolerance. This tool
reads them from a checkout and replays the smallest cases of every kernel
family here:

    python tools/nkilib_check.py /path/to/nki-library [--family NAME]
        [--per-family K] [--case-limit N] [--timeout S] [--json OUT]
        [--markdown OUT] [--listing CACHE] [--list]

Which cases: every family's (test file's) smallest case, then the second
smallest of each, up to ``--case-limit`` (75, the issue's yardstick) and
``--per-family`` (2). Size is the inputs' bytes from a dry run of the test
(the test body runs to the point where it hands the kernel over). Negative,
trace-only and skipped cases are left out.

For each case it calls the ``@nki.jit`` kernel on ``neuron`` tensors
(``kernel[lnc](**inputs)``, as the harness's own CPU-simulation mode does),
computes the reference on the CPU with the library's torch code, compares
with the library's comparator at the test's tolerance and prints one line:
PASS, MISMATCH (max error), NOT_SUPPORTED (the NKI name or feature this
implementation lacks) or ERROR (exception type and first line), with the
wall time of the kernel call. The summary counts the statuses, ranks the
missing NKI features by the number of cases each one blocks, and says how
many failures are two-core, MX, dynamic-control-flow or collective cases
(marked from the tests' parameters), which the simulator is not expected to
run yet.

Why nothing of NKI-lib lives in this repository: it is another project's
code, it changes with every Neuron release, and what we want to know is how
*our* NKI runs *their* current kernels. So the library is the user's checkout (``git clone
https://github.com/aws-neuron/nki-library``), imported from that path at run
time; the driver only supplies stand-ins for the pieces of the harness that
talk to hardware, S3 or AWS-internal packages (``neuron_dtypes``).

How: pytest collects the library's tests with this module's plugin in place
of their conftest (fixtures ``test_manager``, ``collector``,
``platform_target`` and the library's own case generators). Collection runs
with missing NKI names stubbed, so every case can be listed even when its
kernel cannot be imported yet. Each selected case then runs in its own
subprocess against the real NKI names, under a timeout, so nothing one case
does (an import error, a hang, a crash) reaches another.

Needs ``pip install ml_dtypes allpairspy`` (the tests use both).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path

import pytest

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]  # the torch-neuronx checkout under test
TESTS = Path("test") / "integration" / "nkilib"

# The harness launches a kernel with the platform's LNC unless the test sets
# one: TRN2 (NeuronCore-v3, what the simulator models) has LNC=2.
DEFAULT_PLATFORM = "trn2"
DEFAULT_TIMEOUT = 120.0
DEFAULT_PER_FAMILY = 2
# The yardstick: the 75 smallest integration-test cases across families.
DEFAULT_CASES = 75
# Cases dry-run during listing to learn their real input sizes and LNC.
PROBE_CANDIDATES = 4
PROBE_SECONDS = 30
PROBE_MEMORY = 12 << 30

STATUSES = ("PASS", "MISMATCH", "NOT_SUPPORTED", "ERROR")
CATEGORIES = ("two-core", "MX", "dynamic", "collective")

# NKI modules under the short names kernels give them.
NKI_ALIASES = {
    "nki": "nki",
    "nki.language": "nl",
    "nki.isa": "nisa",
    "nki.typing": "nt",
    "neuronxcc.nki": "nki",
    "neuronxcc.nki.language": "nl",
    "neuronxcc.nki.isa": "nisa",
    "neuronxcc.nki.typing": "nt",
}

# Features whose absence puts a failure in one of the expected categories.
_FEATURE_CATEGORY = [
    (re.compile(r"core_barrier|sendrecv|spmd|program_id|num_programs|\bnc\("), "two-core"),
    (re.compile(r"_x4|float4|quantize_mx|matmul_mx|\bmx\b|mxfp|e8m0", re.I), "MX"),
    (re.compile(r"dynamic_range|register_|fori_loop|while|dynamic", re.I), "dynamic"),
    (re.compile(r"collective|all_reduce|all_gather|rank_id|ReplicaGroup", re.I), "collective"),
]

# Third-party modules only the hardware harness imports (metrics upload, ssh,
# HTML reports): stubbed when not installed, never used by a kernel.
_HARNESS_ONLY = ("aws_embedded_metrics", "fabric2", "paramiko", "pytest_html", "plotext", "debugpy")


# --------------------------------------------------------------------------
# Stand-ins: permissive placeholder objects and modules
# --------------------------------------------------------------------------


class _Placeholder:
    """Whatever a missing name is used as while the tests are only listed:
    a decorator passes its function through, a base class becomes ``object``
    (PEP 560), attributes and calls give more placeholders."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and (isinstance(args[0], type) or callable(args[0])):
            return args[0]
        return _Placeholder(f"{self._name}()")

    def __mro_entries__(self, bases):
        return (object,)

    def __getitem__(self, key):
        return self

    def __iter__(self):
        return iter(())

    def __repr__(self):
        return self._name

    def __bool__(self):
        return False

    def __index__(self):
        return 1

    __int__ = __index__
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = lambda self, other: self
    __truediv__ = __floordiv__ = __or__ = __ror__ = __and__ = __neg__ = __add__


def _stub_module(name: str, attrs: dict | None = None) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = []  # a package: its submodules are stubbed too
    module.__dict__.update(attrs or {})
    module.__getattr__ = lambda attr, _n=name: (
        _Placeholder(f"{_n}.{attr}") if not attr.startswith("__") else _raise(AttributeError(attr))
    )
    return module


def _raise(exc):
    raise exc


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves stub modules for the given top-level names (and everything
    under them). Appended to ``sys.meta_path``: real modules always win."""

    def __init__(self, roots):
        self.roots = set(roots)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _stub_module(spec.name)

    def exec_module(self, module):
        pass


MX_X4 = ("float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4")


def _mx_unpack(a, name: str):
    """An MX packed array [..., F] (or any array of the same bytes) as its
    float32 values [..., 4F]: value q of an element in byte q (fp8) or bits
    4q..4q+3 (fp4), as NKI packs them."""
    import ml_dtypes
    import numpy as np

    a = np.ascontiguousarray(a)
    if name == "float4_e2m1fn_x4":
        raw = a.view(np.uint16)
        nib = np.stack([(raw >> (4 * q)) & 0xF for q in range(4)], axis=-1).astype(np.uint8)
        out = nib.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
        return out.reshape(raw.shape[:-1] + (raw.shape[-1] * 4,))
    fp8 = ml_dtypes.float8_e5m2 if name == "float8_e5m2_x4" else ml_dtypes.float8_e4m3fn
    return a.view(np.uint32).view(np.uint8).view(fp8).astype(np.float32)


def _mx_pack(x, name: str):
    """float values [..., 4F] packed into an MX array [..., F] (round to
    nearest even: ml_dtypes' conversion)."""
    import ml_dtypes
    import numpy as np

    from torch_neuronx.nki import dtypes as nkidt

    x = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    target = np.dtype(nkidt.as_dtype(name))
    if name == "float4_e2m1fn_x4":
        nib = x.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
        nib = nib.reshape(x.shape[:-1] + (x.shape[-1] // 4, 4)).astype(np.uint16)
        packed = sum(nib[..., q] << (4 * q) for q in range(4)).astype(np.uint16)
        return packed.view(target)
    fp8 = ml_dtypes.float8_e5m2 if name == "float8_e5m2_x4" else ml_dtypes.float8_e4m3fn
    return np.ascontiguousarray(x.astype(fp8)).view(np.uint32).view(target)


def _neuron_dtypes_standin() -> types.ModuleType:
    """``neuron_dtypes`` is AWS-internal; the tests use a few of its names:
    the element types (the MX packed ones are torch-neuronx's), ``static_cast``
    (to and from MX packed arrays: pack / unpack), ``sizeinbytes``, ``finfo``."""
    import ml_dtypes
    import numpy as np

    from torch_neuronx.nki import dtypes as nkidt

    def resolve(dtype):
        if isinstance(dtype, _Placeholder):
            raise NotImplementedError(f"neuron_dtypes has no {dtype} here")
        if str(dtype) in MX_X4:
            return np.dtype(nkidt.as_dtype(str(dtype)))
        return np.dtype(dtype)

    def static_cast(x, dtype):
        dt = resolve(dtype)
        x = np.asarray(x)
        if str(dt) in MX_X4:
            return x.view(dt) if x.dtype == dt else _mx_pack(x, str(dt))
        if str(x.dtype) in MX_X4:
            x = _mx_unpack(x, str(x.dtype))
        if dt.kind in "iu" and x.dtype.kind == "f":
            x = np.rint(x)  # the compiler's cast rounds
        return x.astype(dt)

    attrs = {
        "static_cast": static_cast,
        "sizeinbytes": lambda dtype: resolve(dtype).itemsize,
        "finfo": lambda dtype: ml_dtypes.finfo(resolve(dtype)),
        "is_float_type": lambda dtype: np.dtype(dtype).kind == "f" or "float" in str(dtype),
        "float8_e4m3fn_x4": nkidt.float8_e4m3fn_x4,
        "float8_e5m2_x4": nkidt.float8_e5m2_x4,
        "float4_e2m1fn_x4": nkidt.float4_e2m1fn_x4,
    }
    module = types.ModuleType("neuron_dtypes")
    module.__dict__.update(attrs)
    module.__torch_neuronx_standin__ = True
    return module


# --------------------------------------------------------------------------
# Import set-up shared by the listing and the run processes
# --------------------------------------------------------------------------


def _nki_modules() -> dict[str, types.ModuleType]:
    mods = {}
    for name in NKI_ALIASES:
        with contextlib.suppress(Exception):
            mods[name] = importlib.import_module(name)
    return mods


def _use_this_torch_neuronx() -> None:
    """Test the torch-neuronx this file belongs to: an editable install of
    another checkout (a CI clone, say) would otherwise answer ``import
    torch_neuronx`` and, through its .pth file, ``import nki``."""
    if not (REPO / "torch_neuronx" / "__init__.py").is_file():
        return
    sys.path.insert(0, str(REPO))
    alias = sys.modules.get("_torch_neuronx_nki")
    if alias is not None and Path(alias.__file__).resolve() != REPO / "_torch_neuronx_nki.py":
        sys.meta_path[:] = [f for f in sys.meta_path if type(f).__module__ != "_torch_neuronx_nki"]
        del sys.modules["_torch_neuronx_nki"]
        importlib.import_module("_torch_neuronx_nki")  # this checkout's finder


def _prepare_imports(checkout: Path, permissive: bool) -> None:
    """Make the checkout importable the way its pytest run would (``test.*``
    from the root, ``nkilib_src`` from ``src``), with stand-ins for the
    hardware harness. ``permissive``: stub the NKI names this implementation
    lacks, so that listing the cases never depends on them."""
    _use_this_torch_neuronx()
    for p in (str(checkout / "src"), str(checkout)):
        if p not in sys.path:
            sys.path.insert(0, p)
    # Python's own regression-test package is also called ``test``.
    if "test" in sys.modules and not str(getattr(sys.modules["test"], "__file__", "")).startswith(
        str(checkout)
    ):
        del sys.modules["test"]
    missing = [m for m in _HARNESS_ONLY if importlib.util.find_spec(m) is None]
    sys.meta_path.append(_StubFinder(missing))
    if "neuron_dtypes" not in sys.modules and importlib.util.find_spec("neuron_dtypes") is None:
        standin = _neuron_dtypes_standin()
        sys.modules["neuron_dtypes"] = standin
        # The compiler's copy of the same helper, imported by a few tests.
        for name in ("neuronxcc.starfish", "neuronxcc.starfish.support"):
            sys.modules.setdefault(name, _stub_module(name))
        sys.modules["neuronxcc.starfish.support.dtype"] = standin
    if permissive:
        for name, module in _nki_modules().items():
            if "__getattr__" not in module.__dict__:
                module.__getattr__ = lambda attr, _n=name: (
                    _Placeholder(f"{_n}.{attr}")
                    if not attr.startswith("__")
                    else _raise(AttributeError(attr))
                )
            if not hasattr(module, "__path__"):
                module.__path__ = []  # nki.isa.constants and friends
        sys.meta_path.append(_StubFinder(["nki", "neuronxcc"]))
    # The harness's Orchestrator drives hosts over ssh; ours runs the kernel here.
    import test.utils  # noqa: F401  (the checkout's package, now first on sys.path)

    orchestrator = types.ModuleType("test.utils.test_orchestrator")
    orchestrator.Orchestrator = _Recorder
    sys.modules["test.utils.test_orchestrator"] = orchestrator
    from test.utils import common_dataclasses as cd

    # Whether a test chose its LNC or took the platform's.
    original_init = cd.CompilerArgs.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        lnc = kwargs.get("logical_nc_config", args[0] if args else None)
        self._lnc_explicit = lnc is not None

    cd.CompilerArgs.__init__ = init


# --------------------------------------------------------------------------
# The test_manager: records (listing) or runs (per-case process) a kernel
# --------------------------------------------------------------------------


class _Probed(Exception):
    """Raised once a dry run has seen the kernel's arguments: nothing runs."""


class _State:
    mode = "probe"  # or "run"
    only_function: str | None = None  # run: the one test function to generate cases for
    probe: dict = {}
    result: dict | None = None
    checkout: Path | None = None


class _Recorder:
    """Stands in for the harness's Orchestrator (``test_manager``)."""

    def __init__(self, *args, **kwargs):
        pass

    @property
    def trace_mode(self):
        """The harness's mode this driver stands in for: its CPU simulation
        (tests that demote hardware runs to compile-only read it)."""
        from test.utils.common_dataclasses import TraceMode

        return TraceMode.Simulator

    def execute(self, kernel_args):
        if _State.mode == "probe":
            _State.probe = _describe(kernel_args)
            raise _Probed()
        _State.result = _run_kernel(kernel_args)


def _kernel_inputs(kernel_args, rank: int = 0) -> dict:
    inputs = kernel_args.kernel_input or {}
    if not isinstance(inputs, dict):  # PerRankLazyInputGenerator (collectives)
        inputs = inputs.for_rank(rank)
    return {k.removesuffix(".must_alias_input"): v for k, v in inputs.items()}


def _describe(kernel_args) -> dict:
    import numpy as np
    from test.utils.ranged_test_harness import is_in_negative_test_context

    inputs = _kernel_inputs(kernel_args)
    arrays = [v for v in _leaves(inputs.values()) if isinstance(v, np.ndarray)]
    compiler = kernel_args.compiler_input
    return {
        # Some tests decide in their body that a case must fail (e.g. a
        # sequence length the LNC does not divide): not a case to run.
        "negative": bool(is_in_negative_test_context()),
        "lnc": int(compiler.logical_nc_config),
        "lnc_explicit": bool(getattr(compiler, "_lnc_explicit", False)),
        "platform": str(compiler.platform_target),
        "collective_ranks": int(getattr(kernel_args.inference_args, "collective_ranks", 1) or 1),
        "input_bytes": int(sum(a.nbytes for a in arrays)),
        "dtypes": sorted({str(a.dtype) for a in arrays}),
        "kernel": getattr(kernel_args.kernel_func, "__name__", repr(kernel_args.kernel_func)),
    }


def _leaves(values):
    for v in values:
        if isinstance(v, (list, tuple)):
            yield from _leaves(v)
        else:
            yield v


def _to_device(value):
    """NumPy inputs (ml_dtypes bf16/fp8 included) to neuron tensors, bit-exact."""
    import numpy as np
    import torch

    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v) for v in value)
    if not isinstance(value, np.ndarray):
        return value
    a = np.ascontiguousarray(value)
    name = a.dtype.name
    if name in MX_X4:
        # Torch has no MX packed types: their containers, tagged with the type.
        bits = np.uint16 if a.dtype.itemsize == 2 else np.uint32
        t = torch.from_numpy(a.view(bits).copy()).to("neuron")
        t.nki_dtype = name
        return t
    views = {
        "bfloat16": torch.bfloat16,
        "float8_e4m3fn": torch.float8_e4m3fn,
        "float8_e5m2": torch.float8_e5m2,
    }
    if name in views:
        bits = np.uint16 if name == "bfloat16" else np.uint8
        t = torch.from_numpy(a.view(bits).copy()).view(views[name])
    elif name.startswith("float8") or name.startswith("float4"):
        # No bit-compatible torch type (e.g. IEEE-style float8_e4m3): by value.
        t = torch.from_numpy(a.astype(np.float32)).to(torch.float8_e4m3fn)
    else:
        t = torch.from_numpy(a.copy())
    return t.to("neuron")


def _to_numpy(value):
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        tag = getattr(value, "nki_dtype", None)
        if tag is not None and str(tag) in MX_X4:
            from torch_neuronx.nki import dtypes as nkidt

            return t.numpy().view(np.dtype(nkidt.as_dtype(str(tag))))
        if t.dtype in (torch.bfloat16, torch.float16) or "float8" in str(t.dtype):
            t = t.float()
        return t.numpy()
    return np.asarray(value)


def _run_kernel(kernel_args) -> dict:
    """Launch as the harness's CPU-simulation mode does (``kernel[lnc](**inputs)``,
    outputs matched to the golden names in order), then compare."""
    from test.utils.common_dataclasses import (
        CustomValidatorWithOutputTensorData,
        LazyGoldenGenerator,
        PerRankLazyGoldenGenerator,
    )

    import torch_neuronx  # noqa: F401  (registers the neuron device)

    info = _describe(kernel_args)
    ranks = info["collective_ranks"]
    phase = "inputs"
    try:
        # A collective case runs every rank (nki.collectives.run_ranks: the
        # ranks traced and run together), each with its own inputs.
        per_rank = [
            {k: _to_device(v) for k, v in _kernel_inputs(kernel_args, r).items()}
            for r in range(ranks)
        ]
        inputs = per_rank[0]
        phase = "kernel"
        kernel = kernel_args.kernel_func
        if not hasattr(type(kernel), "__getitem__"):
            # A plain wrapper function (SBUF I/O tests): the harness compiles
            # whatever it is handed as a kernel, so it becomes one here too.
            import nki

            kernel = nki.jit(kernel)
        launch = kernel[info["lnc"]] if info["lnc"] != 1 else kernel
        start = time.perf_counter()
        if ranks > 1:
            import nki.collectives as ncc

            rank_outs = ncc.run_ranks(launch, per_rank)
        else:
            rank_outs = [launch(**inputs)]

        def as_list(out):
            outs = [] if out is None else list(out) if isinstance(out, (list, tuple)) else [out]
            return [_to_numpy(o) if o is not None else None for o in outs]

        actual_per_rank = [as_list(out) for out in rank_outs]
        sim_seconds = time.perf_counter() - start
        phase = "reference"
        golden = kernel_args.validation_args.golden_output

        def expected_of(rank):
            if isinstance(golden, PerRankLazyGoldenGenerator):
                return golden.for_rank(rank)
            if isinstance(golden, LazyGoldenGenerator):
                # Without a generator the harness validates no values; the
                # collectives tests then state the expected outputs as
                # output_ndarray (every rank's), which is what is compared.
                g = golden.golden
                return golden.output_ndarray if g is None else g
            return golden

        phase = "compare"
        dump = os.environ.get("NKILIB_CHECK_DUMP")
        result = None
        for rank, actual in enumerate(actual_per_rank):
            expected = expected_of(rank)
            actual, expected = _validated_outputs(golden, actual, expected)
            if dump:  # a directory: each case's outputs and references, to debug a mismatch
                _dump(Path(dump), dict(info, rank=rank), actual, expected)
            result = _compare(
                actual, expected, kernel_args.validation_args, CustomValidatorWithOutputTensorData
            )
            if result["status"] != "PASS":
                if ranks > 1:
                    result["detail"] = f"rank {rank}: {result['detail']}"
                if isinstance(golden, LazyGoldenGenerator) and golden.golden is None:
                    result["detail"] += (
                        " (against output_ndarray, which the harness does not check)"
                    )
                break
        result.update(info, sim_seconds=sim_seconds)
        return result
    except Exception as exc:  # each phase's failure is this case's result
        result = _classify(exc)
        result.update(info, phase=phase)
        return result


def _validated_outputs(golden, actual, expected):
    """The outputs the harness validates: a LazyGoldenGenerator's
    placeholders (output_ndarray) name every output in the kernel's order,
    and its golden may hold only some of them (the others are not checked)."""
    names = list(getattr(golden, "output_ndarray", None) or {})
    if isinstance(expected, dict) and len(names) == len(actual) and set(expected) < set(names):
        actual = [a for n, a in zip(names, actual, strict=True) if n in expected]
        expected = {n: expected[n] for n in names if n in expected}
    return actual, expected


def _dump(where: Path, info: dict, actual, expected) -> None:
    import numpy as np

    where.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for k, (name, a) in enumerate(zip(expected, actual, strict=False)):
        b = expected[name]
        if a is not None and not hasattr(b, "validator"):
            a, b = _unpacked(np.asarray(a), np.asarray(b))
            arrays[f"actual_{k}_{name}"] = a.astype(np.float32)
            arrays[f"expected_{k}_{name}"] = b.astype(np.float32)
    test = os.environ.get("PYTEST_CURRENT_TEST", str(info.get("kernel", "case")))
    case = re.sub(r"[^\w.-]+", "_", test.split("::")[-1])[:120]
    if info.get("rank"):
        case += f"_rank{info['rank']}"
    np.savez(where / f"{case}.npz", **arrays)


def _unpacked(a, b):
    """MX packed outputs compare by their values, as the harness's validator
    unpacks them (both sides read as the packed type of either: a reference
    may hold the same bytes as float32, NKI-lib's mxfp_load golden does)."""
    name = next((str(x.dtype) for x in (a, b) if str(x.dtype) in MX_X4), None)
    if name is None:
        return a, b
    return _mx_unpack(a, name), _mx_unpack(b, name)


def _compare(actual, expected, params, custom_type) -> dict:
    """The harness's rule: |a - b| <= atol + rtol * max|b| (their ``maxAllClose``)."""
    import numpy as np
    from test.integration.nkilib.utils.comparators import maxAllClose

    rtol, atol = params.relative_accuracy, params.absolute_accuracy
    names = list(expected)
    if len(actual) != len(names):
        return {
            "status": "MISMATCH",
            "detail": f"kernel returned {len(actual)} outputs, "
            f"the reference {len(names)} ({', '.join(names)})",
        }
    worst, failed = "", []
    for name, a in zip(names, actual, strict=True):
        b = expected[name]
        if isinstance(b, custom_type):
            # Custom validators read the output's raw bytes in its own dtype.
            raw = None if a is None else np.ascontiguousarray(np.asarray(a).astype(b.dtype))
            if raw is None or not b.validator(None).validate(raw):
                failed.append(name)
                worst = worst or f"{name}: custom validator failed"
            continue
        if a is None:
            failed.append(name)
            worst = worst or f"{name}: kernel returned None"
            continue
        a, b = _unpacked(np.asarray(a), np.asarray(b))
        b = b.astype(np.float32)
        a = a.astype(np.float32)
        if a.shape != b.shape:
            if a.size != b.size:
                failed.append(name)
                worst = worst or f"{name}: shape {a.shape} != {b.shape}"
                continue
            a = a.reshape(b.shape)
        with np.errstate(invalid="ignore"):
            err = float(np.nanmax(np.abs(a - b))) if a.size else 0.0
            if np.isnan(a).any() != np.isnan(b).any():
                err = math.nan
        brange = float(np.nanmax(np.abs(b))) if b.size else 0.0
        if not maxAllClose(a, b, rtol=rtol, atol=atol, verbose=0):
            failed.append(name)
            msg = f"{name}: max err {err:.3g} > {atol:g} + {rtol:g}*{brange:.3g}"
            worst = worst or msg
    if failed:
        return {
            "status": "MISMATCH",
            "detail": worst + (f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""),
        }
    return {"status": "PASS", "detail": ""}


# --------------------------------------------------------------------------
# Classification of a case's exception
# --------------------------------------------------------------------------


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    # NKIError leads with the kernel's path:line, which `where` already says.
    line = re.sub(r"^/\S+\.py:\d+: ", "", text[0]) if text else ""
    return line if len(line) <= 160 else line[:157] + "..."


def _where(exc: BaseException) -> str:
    """The innermost frame in the library (kernel or test code)."""
    root = str(_State.checkout) if _State.checkout else None
    where = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        if root and frame.filename.startswith(root):
            where = f"{Path(frame.filename).name}:{frame.lineno}"
    return where


def _nki_alias(module_name: str) -> str | None:
    """``nki.isa`` -> ``nisa`` (the prefix of its attributes); other NKI
    modules keep their full name (``nki.isa.constants``: a module to add)."""
    if module_name in NKI_ALIASES:
        return NKI_ALIASES[module_name]
    if module_name.split(".")[0] in ("nki", "neuronxcc"):
        return module_name
    return None


def _classify(exc: BaseException) -> dict:
    """NOT_SUPPORTED when the failure names an NKI feature this implementation
    lacks (a missing module or attribute, a keyword it does not take, an
    NKIError "not supported yet"); ERROR otherwise."""
    kind = type(exc).__name__
    line = _first_line(exc)
    feature = None
    if isinstance(exc, ModuleNotFoundError) and exc.name and _nki_alias(exc.name):
        feature = exc.name
    elif isinstance(exc, ImportError) and not isinstance(exc, ModuleNotFoundError):
        m = re.search(r"cannot import name '([^']+)' from '([^']+)'", line)
        if m and _nki_alias(m.group(2)):
            feature = f"{_nki_alias(m.group(2))}.{m.group(1)}"
    elif isinstance(exc, AttributeError) and getattr(exc, "name", None):
        obj = getattr(exc, "obj", None)
        if isinstance(obj, types.ModuleType) and _nki_alias(obj.__name__):
            feature = f"{_nki_alias(obj.__name__)}.{exc.name}"
        elif obj is not None and type(obj).__module__.startswith("torch_neuronx"):
            feature = f"{type(obj).__name__}.{exc.name}"
        else:
            m = re.match(r"module '([\w.]+)' has no attribute '(\w+)'", line)
            if m and _nki_alias(m.group(1)):
                feature = f"{_nki_alias(m.group(1))}.{m.group(2)}"
    elif isinstance(exc, TypeError):
        m = re.match(r"(\w+)\(\) got an unexpected keyword argument '(\w+)'", line)
        if m:
            owner = _owner_of(m.group(1))
            if owner:
                feature = f"{owner}.{m.group(1)}({m.group(2)}=)"
        m = re.match(r"(\w+)\.__init__\(\) (got an unexpected keyword|missing \d+ required)", line)
        if m and _is_nki_object(exc, m.group(1)):
            # A library @dataclass deriving from nl.NKIObject, built with
            # keywords its dataclass __init__ does not take (plain class
            # attributes) or without a field it declares: NKI's keyword
            # constructor accepts both.
            feature = "nl.NKIObject as a @dataclass base (NKI's keyword constructor)"
    elif kind == "NKIError" and "not declared mutable" in line:
        # The library writes results into arguments it is handed (its tests
        # pass the output buffers), which NKI 0.8 allows; this NKI asks for
        # an nt.mutable_tensor annotation.
        feature = "writes to kernel arguments not annotated nt.mutable_tensor"
    elif kind == "NKIError" and "not supported yet" in line:
        feature = re.split(r"\s+(?:is |are )?not supported yet", line)[0].strip(" :")[:80]
    elif isinstance(exc, NotImplementedError) and "x4" in line:
        feature = "MX packed dtypes (*_x4)"
    if kind == "NKIError" and getattr(exc, "limit", None):
        kind = f"NKIError[{exc.limit}]"  # which rule of the simulator
    if feature:
        return {
            "status": "NOT_SUPPORTED",
            "feature": feature,
            "detail": f"{kind}: {line}",
            "where": _where(exc),
            "message": str(exc)[:4000],
        }
    # The whole message goes to --json (a capacity error lists its tiles).
    return {
        "status": "ERROR",
        "detail": f"{kind}: {line}",
        "where": _where(exc),
        "message": str(exc)[:4000],
    }


def _is_nki_object(exc: BaseException, class_name: str) -> bool:
    """Whether the class the failing line constructs derives from nl.NKIObject."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    cls = tb.tb_frame.f_globals.get(class_name) if tb is not None else None
    return isinstance(cls, type) and any(
        k.__name__ == "NKIObject" and k.__module__.startswith("torch_neuronx") for k in cls.__mro__
    )


def _owner_of(func_name: str) -> str | None:
    for module_name in ("nki.isa", "nki.language"):
        module = sys.modules.get(module_name)
        if module is not None and func_name in getattr(module, "__dict__", {}):
            return NKI_ALIASES[module_name]
    return None


# --------------------------------------------------------------------------
# The pytest plugin that replaces the library's conftest
# --------------------------------------------------------------------------


def _family(path: Path) -> str:
    return path.stem.removeprefix("test_")


class _Plugin:
    """Fixtures and case generators the library's conftest would provide."""

    def __init__(self):
        self.items = []
        self.collect_errors = {}
        self.reports = {}

    @pytest.fixture
    def test_manager(self):
        return _Recorder()

    @pytest.fixture
    def collector(self):
        from test.utils.metrics_collector import NoopMetricsCollector

        return NoopMetricsCollector()

    @pytest.fixture
    def platform_target(self):
        from test.utils.common_dataclasses import Platforms

        return Platforms(DEFAULT_PLATFORM)

    def pytest_generate_tests(self, metafunc):
        import random

        from test.utils.ranged_test_harness import (
            RANGE_TEST_CONFIG_ATTR_KEY,
            RANGE_TEST_FIXTURE_NAME,
            RANGE_TEST_LIMIT_NUM_TESTS_ATTR_KEY,
            RangeTestHarness,
        )

        if _State.only_function and metafunc.function.__name__ != _State.only_function:
            return  # a run needs one function's cases; generating a module's all takes long
        random.seed(0)  # the generators sample; the listing must be the same every time
        if RANGE_TEST_FIXTURE_NAME in metafunc.fixturenames:
            config = getattr(metafunc.function, RANGE_TEST_CONFIG_ATTR_KEY)
            extra = {}
            if hasattr(metafunc.function, RANGE_TEST_LIMIT_NUM_TESTS_ATTR_KEY):
                extra[RANGE_TEST_LIMIT_NUM_TESTS_ATTR_KEY] = getattr(
                    metafunc.function, RANGE_TEST_LIMIT_NUM_TESTS_ATTR_KEY
                )
            ids, configs = RangeTestHarness(config, **extra).get_unique_test_cases()
            metafunc.parametrize(RANGE_TEST_FIXTURE_NAME, configs, ids=ids)
            return
        marker = metafunc.definition.get_closest_marker("coverage_parametrize")
        if not marker:
            return
        from test.utils.coverage_parametrized_tests import (
            extract_parametrize_args,
            generate_parametrized_test_case,
        )

        params = dict(marker.kwargs)
        coverage = params.pop("coverage", None) or "singles"  # the conftest's default
        options = {
            key: params.pop(key)
            for key in (
                "enable_automatic_boundary_tests",
                "enable_invalid_combination_tests",
                "n_tests_per_boundary_value",
                "max_invalid_tests",
            )
            if key in params
        }
        cases = generate_parametrized_test_case(
            params=params, coverage=coverage, filter_func=params.pop("filter", None), **options
        )
        names, values, ids = extract_parametrize_args(params, cases)
        metafunc.parametrize(names, values, ids=ids)

    def pytest_collectreport(self, report):
        if report.failed:
            text = str(report.longrepr).strip().splitlines()
            self.collect_errors[report.nodeid] = text[-1] if text else "collection failed"

    def pytest_collection_modifyitems(self, session, config, items):
        self.items = list(items)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        if call.when in ("setup", "call") and call.excinfo is not None:
            exc = call.excinfo.value
            if not isinstance(exc, _Probed):
                self.reports.setdefault(item.nodeid, exc)
        del outcome

    def pytest_runtest_setup(self, item):
        if _State.mode == "probe":
            _State.probe = {}
            signal.signal(signal.SIGALRM, _alarm)
            signal.alarm(PROBE_SECONDS)

    def pytest_runtest_teardown(self, item):
        if _State.mode == "probe":
            signal.alarm(0)


def _alarm(signum, frame):
    raise TimeoutError(f"dry run took longer than {PROBE_SECONDS} s")


def _pytest_args(checkout: Path, targets: list[str]) -> list[str]:
    return [
        *targets,
        "--noconftest",  # theirs drives hardware; _Plugin replaces it
        "-c",
        str(checkout / "test" / "pytest.ini"),
        "--rootdir",
        str(checkout),
        "-q",
        "-s",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:warnings",
    ]


# --------------------------------------------------------------------------
# Listing: every case, its size and category markers
# --------------------------------------------------------------------------


def _size_numbers(value, depth=0):
    """The integers a case is parametrized with (shapes, counts, degrees)."""
    if depth > 4 or value is None or isinstance(value, (bool, str, float, type)):
        return
    if isinstance(value, int):
        if 1 < value < 1 << 31:
            yield value
        return
    if isinstance(value, dict):
        for v in value.values():
            yield from _size_numbers(v, depth + 1)
        return
    if isinstance(value, (list, tuple, set)):
        for v in value:
            yield from _size_numbers(v, depth + 1)
        return
    if hasattr(value, "tensors") and hasattr(value, "additional_params"):  # RangeTestCase
        yield from _size_numbers([value.tensors, value.additional_params], depth + 1)
        return
    if hasattr(value, "__dict__") and not isinstance(value, (types.ModuleType, _Placeholder)):
        yield from _size_numbers(vars(value), depth + 1)


def _case_flags(item) -> dict:
    params = getattr(getattr(item, "callspec", None), "params", {})
    negative = bool(params.get("is_negative_test_case"))
    rtc = params.get("range_test_options")
    if rtc is not None and getattr(rtc, "is_negative_test_case", False):
        negative = True
    platforms = item.get_closest_marker("platforms")
    excluded = [str(p) for p in (platforms.kwargs.get("exclude") or [])] if platforms else []
    return {
        "negative": negative,
        # Trace-only tests check a trace, not outputs; skipped ones (an empty
        # parameter set) run nothing.
        "not_run": item.get_closest_marker("trace_only") is not None
        or item.get_closest_marker("skip") is not None,
        "fast": item.get_closest_marker("fast") is not None,
        "not_on_trn2": DEFAULT_PLATFORM in excluded,
        "log_size": sum(math.log(n) for n in _size_numbers(params)),
        "params": {k: _short_repr(v) for k, v in params.items()},
    }


def _short_repr(value) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def _child_list(checkout: Path, out: Path) -> None:
    import resource

    # Dry runs build real inputs; a test whose "small" case is not small
    # gets a MemoryError instead of taking the shared machine down.
    resource.setrlimit(resource.RLIMIT_AS, (PROBE_MEMORY, PROBE_MEMORY))
    _State.checkout = checkout
    _prepare_imports(checkout, permissive=True)
    plugin = _Plugin()
    with contextlib.redirect_stdout(sys.stderr):
        pytest.main(
            _pytest_args(
                checkout,
                [str(checkout / TESTS), "--collect-only", "--continue-on-collection-errors"],
            ),
            plugins=[plugin],
        )
    families: dict[str, dict] = {}
    for err_node, err in plugin.collect_errors.items():
        fam = _family(Path(err_node.split("::")[0]))
        families.setdefault(fam, {"file": err_node, "cases": []})["collect_error"] = err
    candidates: dict[str, list] = {}
    for item in plugin.items:
        if "test_manager" not in item.fixturenames:
            continue  # a helper that pytest picked up by its name
        path = Path(str(item.path)).relative_to(checkout)
        fam = _family(path)
        entry = families.setdefault(fam, {"file": str(path), "cases": []})
        entry["file"] = str(path)
        case = {"nodeid": item.nodeid, "case_id": item.nodeid.split("::")[-1], **_case_flags(item)}
        entry["cases"].append(case)
        if not (case["negative"] or case["not_run"]):
            candidates.setdefault(fam, []).append(case)
    # Dry-run the smallest-looking cases of each family for their real sizes
    # and launch parameters (the kernel does not run; see _Recorder).
    probe_ids = []
    for cases in candidates.values():
        cases.sort(key=lambda c: (c["not_on_trn2"], c["log_size"], not c["fast"]))
        probe_ids += [c["nodeid"] for c in cases[:PROBE_CANDIDATES]]
    probes = {}

    class _ProbePlugin(_Plugin):
        def pytest_runtest_teardown(self, item):
            super().pytest_runtest_teardown(item)
            if _State.probe:
                probes[item.nodeid] = dict(_State.probe)
            _State.probe = {}  # a skipped case never resets it in setup

    _State.mode = "probe"
    with contextlib.redirect_stdout(sys.stderr):
        pytest.main(
            _pytest_args(checkout, [str(checkout / n) for n in probe_ids]), plugins=[_ProbePlugin()]
        )
    for entry in families.values():
        for case in entry["cases"]:
            if case["nodeid"] in probes:
                case["probe"] = probes[case["nodeid"]]
    out.write_text(json.dumps({"families": families}, indent=1, default=str))


# --------------------------------------------------------------------------
# Static scan: the NKI names a test file's import closure uses that we lack
# --------------------------------------------------------------------------


def _static_nki_names(checkout: Path) -> dict[str, set]:
    """The names the real (unpatched) NKI modules have: the aliased ones and
    every other ``nki.*`` module the library imports that imports here."""
    modules = _nki_modules()
    wanted = set()
    for path in [*(checkout / "src").rglob("*.py"), *(checkout / TESTS).rglob("*.py")]:
        wanted |= {u.split(":")[1] for u in _nki_uses(path) if u.startswith(("module:", "from:"))}
        wanted |= {
            u.split(":")[1] + "." + u.split(":")[2]
            for u in _nki_uses(path)
            if u.startswith("from:")
        }
    for name in sorted(wanted - set(modules)):
        if name.split(".")[0] == "nki":
            with contextlib.suppress(Exception):
                modules[name] = importlib.import_module(name)
    return {
        name: set(dir(module)) | set(getattr(module, "__all__", ()))
        for name, module in modules.items()
        if isinstance(module, types.ModuleType)
    }


def _module_file(checkout: Path, dotted: str) -> Path | None:
    for base in (checkout / "src", checkout):
        p = base.joinpath(*dotted.split("."))
        if p.with_suffix(".py").is_file():
            return p.with_suffix(".py")
        if (p / "__init__.py").is_file():
            return p / "__init__.py"
    return None


def _closure(checkout: Path, start: Path) -> list[Path]:
    """The checkout's modules importing ``start`` executes (packages' __init__ too)."""
    seen, todo = [], [start]
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.append(path)
        try:
            tree = ast.parse(path.read_text())
        except SyntaxError:
            continue
        rel = path.relative_to(checkout)
        base = rel.parts[1:] if rel.parts[0] == "src" else rel.parts
        package = list(base[:-1])
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if node.level:
                    up = package[: len(package) - node.level + 1]
                    mod = ".".join(up + ([mod] if mod else []))
                targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
            for dotted in targets:
                # The library and its tests; not the hardware harness (test.utils),
                # which compiles through neuronxcc and is replaced here.
                if not dotted.startswith(("nkilib_src", "test.integration")):
                    continue
                parts = dotted.split(".")
                for i in range(1, len(parts) + 1):
                    f = _module_file(checkout, ".".join(parts[:i]))
                    if f is not None and f not in seen:
                        todo.append(f)
    return seen


def _nki_uses(path: Path) -> set[str]:
    """``alias.attr`` uses of NKI modules in one file, as full names."""
    try:
        tree = ast.parse(path.read_text())
    except SyntaxError:
        return set()
    aliases, uses = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in ("nki", "neuronxcc"):
                    if a.asname:
                        aliases[a.asname] = a.name
                    else:
                        aliases[a.name.split(".")[0]] = a.name.split(".")[0]
                    uses.add(f"module:{a.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in ("nki", "neuronxcc"):
                uses.add(f"module:{node.module}")
                for a in node.names:
                    uses.add(f"from:{node.module}:{a.name}")
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain, cur = [node.attr], node.value
            while isinstance(cur, ast.Attribute):
                chain.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id in aliases:
                uses.add(f"attr:{aliases[cur.id]}:{'.'.join(reversed(chain))}")
    return uses


def _missing_names(checkout: Path, test_file: Path, real: dict[str, set]) -> list[str]:
    missing = set()
    for path in _closure(checkout, test_file):
        for use in _nki_uses(path):
            kind, _, rest = use.partition(":")
            if kind == "module":
                if rest not in real and rest.split(".")[0] in ("nki",):
                    missing.add(rest)
                continue
            module, _, attr = rest.partition(":")
            if kind == "from":
                if module in real:
                    if attr not in real[module] and f"{module}.{attr}" not in real:
                        missing.add(f"{_nki_alias(module)}.{attr}")
                elif module.split(".")[0] == "nki":
                    missing.add(module)
                continue
            # attr: the first step past a module; "nki.language.foo" via `import nki`.
            steps = attr.split(".")
            while module in real and steps and f"{module}.{steps[0]}" in real:
                module = f"{module}.{steps.pop(0)}"
            if module not in real:
                continue  # its import statement is checked above (a module or a name)
            if steps and steps[0] not in real[module]:
                missing.add(f"{_nki_alias(module)}.{steps[0]}")
    return sorted(missing)


# --------------------------------------------------------------------------
# One case, in its own process
# --------------------------------------------------------------------------


def _module_name_for(checkout: Path, path: Path) -> tuple[str, Path]:
    """The name pytest's "prepend" import mode gives a test file."""
    parts, root = [path.stem], path.parent
    while (root / "__init__.py").is_file():
        parts.insert(0, root.name)
        root = root.parent
    return ".".join(parts), root


def _child_run(checkout: Path, nodeid: str, out: Path) -> None:
    _State.checkout = checkout
    _State.mode = "run"
    _State.only_function = nodeid.split("::")[-1].split("[")[0]
    result: dict = {}
    try:
        _prepare_imports(checkout, permissive=False)
        import torch  # noqa: F401

        import torch_neuronx  # noqa: F401

        # Import the test file first: most failures today are here (a name
        # the library's modules use at import time), and we want the exception.
        name, root = _module_name_for(checkout, checkout / nodeid.split("::")[0])
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
        importlib.import_module(name)
    except Exception as exc:
        result = _classify(exc)
        result["phase"] = "import"
    if not result:
        plugin = _Plugin()
        with contextlib.redirect_stdout(sys.stderr):
            pytest.main(_pytest_args(checkout, [str(checkout / nodeid)]), plugins=[plugin])
        if _State.result is not None:
            result = _State.result
        elif nodeid in plugin.reports:
            result = _classify(plugin.reports[nodeid])
            result["phase"] = "test"
        elif not any(i.nodeid == nodeid for i in plugin.items):
            err = next(iter(plugin.collect_errors.values()), "not collected")
            result = {"status": "ERROR", "detail": f"case not collected: {err}", "phase": "collect"}
        else:
            result = {
                "status": "ERROR",
                "detail": "the test never launched a kernel",
                "phase": "test",
            }
    out.write_text(json.dumps(result, default=str))


# --------------------------------------------------------------------------
# The driver
# --------------------------------------------------------------------------


def _rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _spawn(
    args: list[str], timeout: float, memory_limit: float | None = None
) -> tuple[int | None, str, str]:
    """Runs this file as a child in its own process group. Past the timeout or
    the memory limit (resident bytes; the machine is shared) the whole group is
    killed. Returns (exit code or None, the tail of its stderr, why killed)."""
    with tempfile.TemporaryFile("w+") as errf:
        proc = subprocess.Popen(
            [sys.executable, str(HERE), *args],
            stdout=subprocess.DEVNULL,
            stderr=errf,
            text=True,
            start_new_session=True,
        )
        deadline, killed = time.monotonic() + timeout, ""
        while proc.poll() is None:
            if time.monotonic() > deadline:
                killed = "timeout"
            elif memory_limit and _rss_bytes(proc.pid) > memory_limit:
                killed = "memory"
            if killed:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            time.sleep(0.2)
        errf.seek(0, os.SEEK_END)
        errf.seek(max(0, errf.tell() - 20000))
        return (None if killed else proc.returncode), errf.read(), killed


def _categories(family: str, case: dict, result: dict | None = None) -> list[str]:
    """Marked from the test's parameters (and its dry run), and from the
    feature that stopped the case when that feature belongs to a category."""
    probe = case.get("probe", {})
    params = " ".join(f"{k}={v}" for k, v in case["params"].items())
    text = f"{family} {case['case_id']} {params}".lower()
    cats = set()
    lnc_param = re.search(r"(?:^|[^a-z])(?:lnc|vnc)[a-z_]*[-=:' ]+2\b", text) or re.search(
        r"logical_nc_config[-=:' ]+2\b", text
    )
    if (probe.get("lnc") == 2 and probe.get("lnc_explicit")) or (not probe and lnc_param):
        cats.add("two-core")
    dtypes = " ".join(probe.get("dtypes", []))
    if re.search(r"(?:^|[^a-z])mx|mxfp|_x4|float4", text + " " + dtypes) or case.get("not_on_trn2"):
        cats.add("MX")
    if "dynamic" in text:
        cats.add("dynamic")
    ranks = probe.get("collective_ranks", 1)
    if (
        ranks > 1
        or "collective" in text
        or re.search(r"(?:tp_degree|src_ranks|ranks)[-=:' ]+([2-9]|\d\d)", text)
    ):
        cats.add("collective")
    if result and result.get("status") != "PASS":
        blob = f"{result.get('feature', '')} {result.get('detail', '')}"
        for pattern, cat in _FEATURE_CATEGORY:
            if result.get("feature") and pattern.search(blob):
                cats.add(cat)
    return [c for c in CATEGORIES if c in cats]


def _select(families: dict, wanted: list[str], per_family: int, limit: int | None) -> list[tuple]:
    """The smallest case of every family, then the second smallest of each
    (smallest first), ... up to ``per_family`` each and ``limit`` in all."""

    def size(c):
        probe = c.get("probe")
        # Real input bytes where the dry run got them, else the parameters.
        return (
            c["not_on_trn2"],
            0 if probe else 1,
            probe["input_bytes"] if probe else c["log_size"],
        )

    ranked = {}
    for fam in sorted(families):
        if wanted and not any(fam == w or fam.startswith(w) for w in wanted):
            continue
        cases = [
            c
            for c in families[fam]["cases"]
            if not (c["negative"] or c["not_run"] or c.get("probe", {}).get("negative"))
        ]
        unique, seen = [], set()
        for case in sorted(cases, key=size):
            # A fast test and a sweep often share their smallest case.
            params = tuple(
                sorted(kv for kv in case["params"].items() if kv[0] != "is_negative_test_case")
            )
            key = (case.get("probe", {}).get("kernel"), params)
            if key not in seen:
                seen.add(key)
                unique.append(case)
        ranked[fam] = unique[:per_family]
    chosen = []
    for rank in range(per_family):
        layer = [(fam, cases[rank]) for fam, cases in ranked.items() if len(cases) > rank]
        chosen += layer if rank == 0 else sorted(layer, key=lambda fc: size(fc[1]))
    chosen = chosen[:limit] if limit else chosen
    order = {fam: i for i, fam in enumerate(sorted(ranked))}
    return sorted(chosen, key=lambda fc: (order[fc[0]], size(fc[1])))


def _status_text(r: dict) -> str:
    s = r["status"]
    if s == "PASS":
        return "PASS"
    if s == "NOT_SUPPORTED":
        return f"NOT_SUPPORTED ({r['feature']})"
    detail = r.get("detail", "")
    where = f" @ {r['where']}" if r.get("where") else ""
    phase = f" [{r['phase']}]" if r.get("phase") and s == "ERROR" else ""
    return f"{s} ({detail}){where}{phase}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "checkout", type=Path, help="an NKI-lib checkout (git clone of aws-neuron/nki-library)"
    )
    parser.add_argument(
        "--family", action="append", default=[], help="only this family (repeatable; a prefix)"
    )
    parser.add_argument(
        "--per-family",
        type=int,
        default=DEFAULT_PER_FAMILY,
        help="at most K smallest cases per family",
    )
    parser.add_argument(
        "--case-limit",
        type=int,
        default=DEFAULT_CASES,
        help="N cases in all: each family's smallest, then second smallest, ... (0: no limit)",
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per case")
    parser.add_argument("--memory-limit", type=float, default=8.0, help="GiB resident per case")
    parser.add_argument("--json", type=Path, help="write every result here")
    parser.add_argument(
        "--markdown", type=Path, help="write the per-family table (docs/nki.md) here"
    )
    parser.add_argument("--list", action="store_true", help="list the selected cases, run nothing")
    parser.add_argument(
        "--listing",
        type=Path,
        help="reuse this listing of the cases if it exists, else save it there (it takes minutes)",
    )
    parser.add_argument("--_child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args._child:
        what, target, out = args._child
        if what == "list":
            _child_list(args.checkout.resolve(), Path(out))
        else:
            _child_run(args.checkout.resolve(), target, Path(out))
        return 0

    checkout = args.checkout.resolve()
    if not (checkout / TESTS).is_dir() or not (checkout / "src" / "nkilib_src").is_dir():
        parser.error(f"{checkout} is not an NKI-lib checkout (no {TESTS} or src/nkilib_src)")
    for need in ("ml_dtypes", "allpairspy", "pytest"):
        if importlib.util.find_spec(need) is None:
            parser.error(f"the library's tests need {need}: pip install {need}")
    commit = subprocess.run(
        ["git", "-C", str(checkout), "log", "-1", "--format=%H"], capture_output=True, text=True
    ).stdout.strip()

    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="nkilib_check_") as tmp:
        listing = args.listing or Path(tmp) / "list.json"
        if not listing.exists():
            code, err, _ = _spawn(
                ["--_child", "list", "-", str(listing), str(checkout)], timeout=3600
            )
            if code != 0 or not listing.exists():
                print(err[-3000:], file=sys.stderr)
                print("listing the library's test cases failed", file=sys.stderr)
                return 2
        families = json.loads(listing.read_text())["families"]
        chosen = _select(families, args.family, args.per_family, args.case_limit)
        total_cases = sum(len(f["cases"]) for f in families.values())
        print(
            f"NKI-lib {commit[:12] or '(not a git checkout)'}: {len(families)} families, "
            f"{total_cases} "
            f"test cases; running the {args.per_family} smallest of each: {len(chosen)} cases"
        )
        broken = {
            fam: entry["collect_error"].removeprefix("E").strip()
            for fam, entry in sorted(families.items())
            if entry.get("collect_error")
            and (not args.family or any(fam.startswith(w) for w in args.family))
        }
        for fam, err in broken.items():
            # The library's own bug at this commit: no case of it can run anywhere.
            print(f"  {fam}: its test file does not import at this commit ({err}); not counted")
        if args.list:
            for fam, case in chosen:
                cats = ",".join(_categories(fam, case))
                probe = case.get("probe", {})
                print(
                    f"{fam:<28} {case['case_id']}  {probe.get('input_bytes', '?')} B  "
                    f"lnc={probe.get('lnc', '?')} {cats}"
                )
            return 0

        results = []
        width = max((len(f) for f, _ in chosen), default=10)
        for fam, case in chosen:
            out = Path(tmp) / "case.json"
            out.unlink(missing_ok=True)
            t0 = time.perf_counter()
            code, err, killed = _spawn(
                ["--_child", "run", case["nodeid"], str(out), str(checkout)],
                args.timeout,
                args.memory_limit * 2**30,
            )
            wall = time.perf_counter() - t0
            if killed == "timeout":
                result = {
                    "status": "ERROR",
                    "detail": f"TimeoutError: case took longer than {args.timeout:g} s",
                }
            elif killed == "memory":
                result = {
                    "status": "ERROR",
                    "detail": f"MemoryError: case used more than {args.memory_limit:g} GiB",
                }
            elif out.exists():
                result = json.loads(out.read_text())
            else:
                last = (err.strip().splitlines() or ["no output"])[-1]
                result = {
                    "status": "ERROR",
                    "detail": f"the case's process died (exit {code}): {last}",
                }
            cats = _categories(fam, case, result)
            probe = case.get("probe", {})
            lnc = result.get("lnc", probe.get("lnc"))
            explicit = result.get("lnc_explicit", probe.get("lnc_explicit"))
            record = {
                "family": fam,
                "case": case["case_id"],
                "nodeid": case["nodeid"],
                "categories": cats,
                "wall_seconds": round(wall, 2),
                "lnc": lnc,
                "lnc_explicit": explicit,
                **result,
            }
            results.append(record)
            sim = f"sim {result['sim_seconds']:.2f}s" if "sim_seconds" in result else "sim -"
            lnc_text = f"lnc={lnc}{'' if explicit else '*'}" if lnc else "lnc=?"
            tags = f" [{' '.join(cats)}]" if cats else ""
            line = f"{fam:<{width}}  {case['case_id']}  {_status_text(result)}"
            print(f"{line}  {sim}  {lnc_text}{tags}", flush=True)

    # Which NKI names each failing case's modules use that this NKI lacks:
    # a static scan, done now so that it describes the NKI the cases ran on.
    _use_this_torch_neuronx()
    real_names = _static_nki_names(checkout)
    for fam in {r["family"] for r in results if r["status"] != "PASS"}:
        families[fam]["missing_names"] = _missing_names(
            checkout, checkout / families[fam]["file"], real_names
        )
    elapsed = time.perf_counter() - t_start
    _summary(results, families, elapsed)
    if broken:
        print("Not counted (test file fails to import at this commit): " + ", ".join(broken))
    if args.markdown:
        args.markdown.write_text(_markdown(results, broken))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "commit": commit,
                    "elapsed_seconds": round(elapsed, 1),
                    "results": results,
                    "not_importable": broken,
                },
                indent=1,
            )
        )
    return 0


def _markdown(results: list[dict], broken: dict) -> str:
    """One row per family: its cases' statuses (equal ones counted once,
    ``2×``) and the kernel-call times of those that ran."""
    from collections import Counter

    rows = ["| family | cases | status | sim time |", "| --- | --- | --- | --- |"]
    by_family: dict[str, list] = {}
    for r in results:
        by_family.setdefault(r["family"], []).append(r)
    for fam, rs in by_family.items():
        counts = Counter(_status_text(r).replace("|", "/").replace(" [kernel]", "") for r in rs)
        status = "; ".join(f"{k}× {t}" if k > 1 else t for t, k in counts.items())
        times = ", ".join(f"{r['sim_seconds']:.2f} s" for r in rs if "sim_seconds" in r) or "–"
        rows.append(f"| {fam} | {len(rs)} | {status} | {times} |")
    for fam, err in broken.items():
        rows.append(f"| {fam} | – | test file does not import at this commit ({err}) | – |")
    return "\n".join(rows) + "\n"


def _summary(results: list[dict], families: dict, elapsed: float) -> None:
    from collections import Counter

    n = len(results)
    counts = Counter(r["status"] for r in results)
    passes = counts.get("PASS", 0)
    print()
    print(f"Summary: {passes}/{n} pass; " + ", ".join(f"{s} {counts.get(s, 0)}" for s in STATUSES))
    failing = [r for r in results if r["status"] != "PASS"]
    in_cat = [r for r in failing if r["categories"]]
    print(
        f"Failures in the expected categories (two-core, MX, dynamic control, collectives): "
        f"{len(in_cat)} of {len(failing)}; "
        + ", ".join(f"{c} {sum(c in r['categories'] for r in failing)}" for c in CATEGORIES)
    )
    plain = [r for r in results if not r["categories"]]
    print(
        f"Outside those categories: {sum(r['status'] == 'PASS' for r in plain)}/{len(plain)} pass"
    )
    blockers = Counter(r["feature"] for r in results if r["status"] == "NOT_SUPPORTED")
    if blockers:
        print("Missing features, by cases they stop (first failure of each case):")
        for feature, k in blockers.most_common():
            print(f"  {k:4d}  {feature}")
    referenced = Counter()
    for r in results:
        fam = families.get(r["family"], {})
        if r["status"] != "PASS":
            referenced.update(fam.get("missing_names", []))
    if referenced:
        print("NKI names the failing cases' modules use that this implementation lacks (cases):")
        print("  " + ", ".join(f"{name} {k}" for name, k in referenced.most_common(40)))
    errors = Counter(r["detail"].split(":")[0] for r in results if r["status"] == "ERROR")
    if errors:
        print("Errors by type: " + ", ".join(f"{e} {k}" for e, k in errors.most_common()))
    sim = sum(r.get("sim_seconds", 0.0) for r in results)
    print(f"Wall time {elapsed:.0f} s (kernel calls {sim:.1f} s)")


if __name__ == "__main__":
    # The child's arguments come last: `--_child WHAT TARGET OUT CHECKOUT`.
    sys.exit(main())
