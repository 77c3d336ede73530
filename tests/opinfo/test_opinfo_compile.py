"""Differential OpInfo phase under ``torch.compile``: op_db ops compiled with
``backend="neuron"`` on neuron tensors, against the same op run eagerly on CPU.

One test per OpInfo entry, one sample each: the op's first sample in float32 (ops
without float32: the first of float64, int64, int32, bool, complex64, or any dtype
the CPU takes). The op is wrapped in a function of the sample's tensors (the other
arguments are constants), Dynamo is reset, and the function is compiled with
``backend="neuron"`` (Inductor's C++ kernels, each call of a compiled graph one work
item on the device stream), with ``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1`` so that
a graph Inductor cannot compile fails instead of running eagerly.

- "forward": the compiled outputs must match the eager CPU ones (shape, dtype, layout
  exactly; values within the float32 tolerances of ``torch.testing``, or those of
  ``known_failures.COMPILE_TOLERANCES``), live on neuron, and the sample's tensors
  after the call must match the CPU ones too (input mutation reaches the caller).
  Strides are compared where CPU's result is dense, but only counted (as in the eager
  phase, differences are not failures here).
- "backward": for differentiable ops (float32 in the op's CPU backward dtypes) the
  sample is made with ``requires_grad``, so the same compiled call goes through
  AOTAutograd: the forward graph runs, and ``torch.autograd.grad`` with the seeded
  random cotangents of the eager run compiles and runs the backward graph; the input
  gradients must match the eager CPU ones.

Only ops whose compiled graph actually ran count. If Dynamo hands no graph to the
backend (the op graph-breaks right away: ``.item()``, data-dependent output shapes),
the call is repeated with ``capture_scalar_outputs`` and
``capture_dynamic_output_shape_ops``; an op that still compiles no graph is "not
compiled" and is counted apart (unless the CPU compile does compile a graph: then
it fails).

The requirement: of the ops whose CPU compile works, >= 95% pass forward, and >= 95%
of the differentiable ones pass backward. When the neuron compile fails, the same
function is compiled with ``backend="inductor"`` on the CPU copy of the sample and
compared with eager CPU in the same way: if that fails too, the op (or its backward)
is outside the requirement ("excluded": counted, listed with the CPU error, and
flagged when the CPU failure comes from torch_neuronx's own code). Every other
failure must be listed in ``known_failures.COMPILE_EXPECTED_FAILURES`` with its
reason; an entry whose phases all pass fails the test (XPASS), so the list stays
honest. ``test_compile_pass_rate`` checks the two rates over the ops that ran, and
the terminal summary prints them, the failures and the exclusions.

Scope and time. A compile costs ~0.3 s (matmuls, views: no C++) to ~3 s (a C++
kernel is one g++ run of ~1.2 s even with Inductor's precompiled header; a backward
graph is a second compile), a few ~10-35 s (bicubic interpolation, householder). The
full sweep (702 ops) took 14 min wall on this 2-core machine from a cold Inductor
cache (with the helper below; ~30 min of compiling in all), against CI's ~6-minute
budget for the phase; forward compiles are ~60% of that time, so forward alone for
every op (~8 min) does not fit either. So:

- ``TORCH_NEURONX_OPINFO_COMPILE=all``: every op (the full sweep; the requirement is
  stated for it);
- ``TORCH_NEURONX_OPINFO_COMPILE=i/N``: shard ``i`` of ``N`` (a CI matrix of N jobs
  covers every op); an op's shard is ``crc32(key) % N``, so it does not move when
  op_db gains or loses ops;
- unset (CI's default): shard ``DEFAULT_SHARD`` = 0/3, a fixed, hash-drawn third of
  the ops (226), forward and backward, ~3.8 min wall from a cold cache; the same
  gates apply to it (its pass rates are those of a uniform sample of op_db; each of
  the three shards passes them). A whole shard rather than forward-only for more
  ops: backward graphs are where AOTAutograd, the partitioner and the two programs
  per training step (forward, backward) are exercised.

With two or more CPUs, a helper process compiles the selected ops from the end of
the list towards the start into the same Inductor cache while the tests run from
the start (``TORCH_NEURONX_OPINFO_COMPILE_WARMER=0`` turns it off): when the tests
reach an op it compiled, the FX graph / AOTAutograd caches hit, so both cores
compile; it stops where the two meet. Results never come from the helper: every op
is compiled (or loaded from the cache), run and compared in the test process.
Inductor compiles in-process (``compile_threads=1``): one graph's kernels are few.

Run: ``python -m pytest tests/opinfo/test_opinfo_compile.py`` (the default shard);
``TORCH_NEURONX_OPINFO_COMPILE=all python -m pytest tests/opinfo/test_opinfo_compile.py``
(the full sweep); with ``=all`` and ``-k 'compile_op and erfinv'``, one op whatever
its shard.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
import zlib
from dataclasses import dataclass, field

import pytest
import torch
from known_failures import (
    COMPILE_EXPECTED_FAILURES,
    COMPILE_SKIP,
    COMPILE_TOLERANCES,
    NOT_APPLICABLE,
    RANDOM_SAMPLES,
    VALUE_NOT_COMPARABLE,
    XFail,
)
from opinfo_common import (
    OPS,
    Comparison,
    Mismatch,
    check_devices,
    compare,
    covering,
    flatten,
    grad_inputs,
    grad_outputs,
    map_sample,
    move_tensor,
    op_key,
    run_op,
    samples,
    short_error,
    sync_and_swallow,
    time_limit,
    to_cpu,
    to_neuron_sample,
    unused_xfails,
)
from torch.utils._pytree import tree_flatten, tree_unflatten

import torch_neuronx

SCOPE_ENV = "TORCH_NEURONX_OPINFO_COMPILE"
WARMER_ENV = "TORCH_NEURONX_OPINFO_COMPILE_WARMER"
DEFAULT_SHARD = (0, 3)
MIN_PASS_RATE = 0.95
MIN_RATE_OPS = 20
# Per compile-and-run step (the conftest watchdog ends the session after 300 s).
STEP_TIMEOUT_S = 90
WARMER_MIN_OPS = 24  # fewer selected ops: not worth starting the helper
DTYPE_PREFERENCE = (
    torch.float32,
    torch.float64,
    torch.int64,
    torch.int32,
    torch.bool,
    torch.complex64,
)
GRAD_DTYPE = torch.float32
CAPTURE = {"capture_scalar_outputs": True, "capture_dynamic_output_shape_ops": True}
PHASES = ("forward", "backward")

# Outcomes of a phase.
PASS, FAIL, EXCLUDED, NOT_COMPILED, NA = "pass", "fail", "excluded", "not compiled", "n/a"


# ---------------------------------------------------------------- scope


def scope() -> tuple[int, int] | None:
    """(shard, shards) to run, or None for every op."""
    value = os.environ.get(SCOPE_ENV, "").strip()
    if value == "all":
        return None
    if not value:
        return DEFAULT_SHARD
    try:
        i, n = (int(v) for v in value.split("/"))
    except ValueError:
        raise ValueError(f"{SCOPE_ENV}={value!r}: expected 'all' or 'i/N'") from None
    if not 0 <= i < n:
        raise ValueError(f"{SCOPE_ENV}={value!r}: shard out of range")
    return i, n


def shard_of(key: str, shards: int) -> int:
    return zlib.crc32(key.encode()) % shards


def selected_ops() -> list:
    s = scope()
    return [op for op in OPS if s is None or shard_of(op_key(op), s[1]) == s[0]]


def scope_name() -> str:
    s = scope()
    return "all ops" if s is None else f"shard {s[0]}/{s[1]}"


SELECTED = selected_ops()


# ---------------------------------------------------------------- one op


@dataclass
class Outcome:
    key: str
    dtype: torch.dtype | None = None
    forward: str = NA
    backward: str = NA
    forward_error: str = ""
    backward_error: str = ""
    # Why the CPU compile fails (forward / backward excluded), and whether the
    # failure comes from torch_neuronx's own code.
    cpu_error: str = ""
    cpu_broken_by_neuronx: bool = False
    why_na: str = ""
    graphs: int = 0
    captured: bool = False  # compiled only with the capture_* options
    cache_hits: int = 0  # graphs loaded from Inductor's FX graph cache
    strides_compared: int = 0
    stride_mismatches: list[str] = field(default_factory=list)
    seconds: float = 0.0


def pick_dtype(op) -> torch.dtype | None:
    supported = op.supported_dtypes("cpu")
    for dtype in DTYPE_PREFERENCE:
        if dtype in supported:
            return dtype
    return sorted(supported, key=str)[0] if supported else None


def copy_sample(sample, device: str, key: str):
    """A fresh copy of a (pristine) CPU sample on ``device``: same geometry, leaves
    that require grad stay leaves that require grad."""
    if device == "cpu":
        return map_sample(sample, lambda t: move_tensor(t, "cpu"))
    return to_neuron_sample(sample, key)


def tensors_of(sample) -> list[torch.Tensor]:
    return [
        t
        for t in flatten([sample.input, sample.args, sample.kwargs])
        if isinstance(t, torch.Tensor)
    ]


def cotangents_for(outs: list[torch.Tensor]) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(o.shape, dtype=o.dtype, generator=gen) for o in outs]


def gradients(sample, out, cotangents):
    """The input gradients of ``out`` (None if nothing is differentiable)."""
    outs = grad_outputs(sample.output_process_fn_grad(out))
    ins = grad_inputs(sample)
    if not outs or not ins:
        return None
    if len(outs) != len(cotangents):
        raise Mismatch(f"{len(outs)} differentiable outputs, expected {len(cotangents)}")
    cots = [c.to(o.device) for c, o in zip(cotangents, outs, strict=True)]
    return torch.autograd.grad(outs, ins, cots, allow_unused=True)


def compiled_call(op, sample, backend: str):
    """``op`` on ``sample`` through ``torch.compile``: the sample's tensors are the
    compiled function's arguments, everything else a constant."""
    leaves, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    positions = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
    constants = [None if isinstance(x, torch.Tensor) else x for x in leaves]
    fn = op.op

    def call(*tensors):
        parts = list(constants)
        for i, t in zip(positions, tensors, strict=True):
            parts[i] = t
        inp, args, kwargs = tree_unflatten(parts, spec)
        return fn(inp, *args, **kwargs)

    return torch.compile(call, backend=backend)(*[leaves[i] for i in positions])


def graphs_compiled() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def cache_hits() -> int:
    from torch._dynamo.utils import counters

    return counters["inductor"]["fxgraph_cache_hit"]


def tolerances(key: str) -> dict | None:
    entry = COMPILE_TOLERANCES.get(key)
    return entry.by_dtype if entry else None


def compare_grads(actual, expected, key: str, seen: Comparison | None) -> None:
    if actual is None or expected is None:
        if (actual is None) != (expected is None):
            raise Mismatch(f"grads: got {actual is not None}, expected {expected is not None}")
        return
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        if (a is None) != (e is None):
            raise Mismatch(f"grad[{i}]: got {'None' if a is None else 'a tensor'}")
        if e is not None:
            compare(to_cpu(a), e, True, key, f"grad[{i}]", seen, tolerances(key))


@dataclass
class Run:
    """One compiled run of a sample: what failed, and how many graphs compiled."""

    forward_error: str | None = None
    backward_error: str | None = None
    backward_ran: bool = False
    graphs: int = 0
    traceback_text: str = ""


def run_compiled(op, key, sample, backend, reference, values, seen, capture=False) -> Run:
    """Compiles and runs ``sample`` (a fresh copy on the backend's device) and compares
    it with ``reference`` = (eager outputs, eager sample after the call, eager grads,
    cotangents)."""
    expected, expected_inputs, expected_grads, cotangents = reference
    run = Run()
    torch._dynamo.reset()
    before = graphs_compiled()
    device_check = backend == "neuron"
    patch = torch._dynamo.config.patch(**CAPTURE) if capture else contextlib.nullcontext()
    out = None
    try:
        with patch, warnings.catch_warnings(), time_limit(STEP_TIMEOUT_S):
            warnings.simplefilter("ignore")
            out = compiled_call(op, sample, backend)
            if device_check:
                torch.neuron.synchronize()
                check_devices(out)
            run.graphs = graphs_compiled() - before
            compare(
                to_cpu(out), to_cpu(expected), values, key, seen=seen, tolerances=tolerances(key)
            )
            if values:
                compare(
                    to_cpu(tensors_of(sample)),
                    expected_inputs,
                    True,
                    key,
                    "input after the call",
                    tolerances=tolerances(key),
                )
    except Exception as e:
        run.graphs = graphs_compiled() - before
        run.forward_error = short_error(e)
        run.traceback_text = "".join(traceback.format_exception(e))
    if expected_grads is None or out is None:
        return run
    run.backward_ran = True
    try:
        with warnings.catch_warnings(), time_limit(STEP_TIMEOUT_S):
            warnings.simplefilter("ignore")
            grads = gradients(sample, out, cotangents)
            if device_check:
                torch.neuron.synchronize()
                check_devices([g for g in grads or () if g is not None], "grad")
            compare_grads(grads, expected_grads, key, seen)
    except Exception as e:
        run.backward_error = short_error(e)
        run.traceback_text += "".join(traceback.format_exception(e))
    return run


NEURONX_DIR = os.path.dirname(os.path.abspath(torch_neuronx.__file__))


def check_op(op, warm: bool = False) -> Outcome:
    """Compiles and compares one op (``warm``: only compile and run it, for the cache)."""
    key = op_key(op)
    result = Outcome(key)
    start = time.perf_counter()
    try:
        _check_op(op, key, result, warm)
    finally:
        result.seconds = time.perf_counter() - start
        torch._dynamo.reset()
    return result


def _check_op(op, key: str, result: Outcome, warm: bool) -> None:
    sync_and_swallow()
    if key in NOT_APPLICABLE:
        result.why_na = NOT_APPLICABLE[key]
        return
    dtype = pick_dtype(op)
    if dtype is None:
        result.why_na = "OpInfo lists no CPU dtype"
        return
    result.dtype = dtype
    differentiable = (
        dtype == GRAD_DTYPE
        and op.supports_autograd
        and GRAD_DTYPE in op.supported_backward_dtypes("cpu")
        and key not in VALUE_NOT_COMPARABLE
    )
    sample = next(iter(samples(op, dtype, differentiable)), None)
    if sample is None:
        result.why_na = "no sample on CPU"
        return
    random = RANDOM_SAMPLES.get(key)
    values = key not in VALUE_NOT_COMPARABLE and not (random and random.is_random(sample))
    differentiable = differentiable and values

    # The eager CPU reference, on a copy: the pristine sample makes the compiled runs'.
    pristine = copy_sample(sample, "cpu", key)
    try:
        with warnings.catch_warnings(), time_limit(STEP_TIMEOUT_S):
            warnings.simplefilter("ignore")
            expected = run_op(op, sample)
            expected_inputs = to_cpu(tensors_of(sample))
            expected_grads = cotangents = None
            if differentiable:
                outs = grad_outputs(sample.output_process_fn_grad(expected))
                cotangents = cotangents_for(outs)
                expected_grads = gradients(sample, expected, cotangents)
    except Exception as e:
        result.why_na = f"eager CPU raises: {short_error(e, 200)}"
        return
    reference = (expected, expected_inputs, expected_grads, cotangents)
    has_grads = expected_grads is not None

    seen = Comparison()
    hits = cache_hits()
    run = run_compiled(
        op, key, copy_sample(pristine, "neuron", key), "neuron", reference, values, seen
    )
    if run.forward_error is None and run.graphs == 0:
        # Nothing reached the backend: capture .item() and data-dependent shapes.
        result.captured = True
        seen = Comparison()
        run = run_compiled(
            op, key, copy_sample(pristine, "neuron", key), "neuron", reference, values, seen, True
        )
    if warm:
        return
    result.cache_hits = cache_hits() - hits
    result.graphs = run.graphs
    result.strides_compared = seen.strides_compared
    result.stride_mismatches = [
        f"{where} {shape}: strides {list(got)}, CPU {list(want)}"
        for where, got, want, shape in seen.stride_mismatches
    ]
    result.forward = FAIL if run.forward_error else PASS
    result.forward_error = run.forward_error or ""
    if has_grads:
        if not run.backward_ran:
            result.backward = FAIL
            result.backward_error = "forward failed: " + result.forward_error
        else:
            result.backward = FAIL if run.backward_error else PASS
            result.backward_error = run.backward_error or ""
    not_compiled = run.forward_error is None and run.graphs == 0
    if result.forward == PASS and result.backward != FAIL and not not_compiled:
        return

    # The same function compiled for CPU: does Inductor itself handle it?
    cpu = run_compiled(
        op,
        key,
        copy_sample(pristine, "cpu", key),
        "inductor",
        reference,
        values,
        None,
        result.captured,
    )
    if not_compiled:
        if cpu.graphs == 0:
            result.forward = NOT_COMPILED
            if has_grads and result.backward == PASS:
                result.backward = NOT_COMPILED
        else:
            result.forward = FAIL
            result.forward_error = (
                f"no graph compiled on neuron; the CPU compile compiles {cpu.graphs}"
            )
        return
    cpu_fails = []
    if result.forward == FAIL and cpu.forward_error:
        result.forward = EXCLUDED
        cpu_fails.append(cpu.forward_error)
    if result.backward == FAIL and (cpu.forward_error or cpu.backward_error):
        result.backward = EXCLUDED
        cpu_fails.append(cpu.forward_error or cpu.backward_error)
    if cpu_fails:
        result.cpu_error = cpu_fails[0]
        result.cpu_broken_by_neuronx = NEURONX_DIR + os.sep in cpu.traceback_text


# ---------------------------------------------------------------- results


def compile_xfails(key: str) -> tuple[XFail, ...]:
    entry = COMPILE_EXPECTED_FAILURES.get(key)
    if entry is None:
        return ()
    return entry if isinstance(entry, tuple) else (entry,)


@dataclass
class CompileResults:
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)

    def in_scope(self, phase: str) -> list[Outcome]:
        return [o for o in self.outcomes.values() if getattr(o, phase) in (PASS, FAIL)]

    def rate(self, phase: str) -> tuple[int, int]:
        ops = self.in_scope(phase)
        return sum(getattr(o, phase) == PASS for o in ops), len(ops)


_RESULTS = CompileResults()


class _Summary:
    """Prints the phase's summary at the end of the session (registered as a plugin)."""

    def pytest_terminal_summary(self, terminalreporter) -> None:
        outcomes = list(_RESULTS.outcomes.values())
        if not outcomes:
            return
        write = terminalreporter.write_line
        write("")
        write(f"torch.compile OpInfo phase ({scope_name()}, {len(outcomes)} ops run):")
        for phase in PHASES:
            passed, total = _RESULTS.rate(phase)
            counts = {
                s: sum(getattr(o, phase) == s for o in outcomes)
                for s in (PASS, FAIL, EXCLUDED, NOT_COMPILED, NA)
            }
            rate = 100.0 * passed / total if total else 100.0
            excluded_ours = sum(
                getattr(o, phase) == EXCLUDED and o.cpu_broken_by_neuronx for o in outcomes
            )
            strict = 100.0 * passed / (total + excluded_ours) if total + excluded_ours else 100.0
            write(
                f"  {phase}: {passed}/{total} pass ({rate:.1f}%; >= {MIN_PASS_RATE:.0%} "
                f"required); "
                + ", ".join(f"{n} {s}" for s, n in counts.items())
                + f"; counting the {excluded_ours} excluded by torch_neuronx's own code as "
                f"failures: {strict:.1f}%"
            )
        n_strides = sum(o.strides_compared for o in outcomes)
        mism = [o for o in outcomes if o.stride_mismatches]
        write(
            f"  strides: {n_strides} dense CPU results compared, "
            f"{sum(len(o.stride_mismatches) for o in mism)} mismatches in {len(mism)} ops"
        )
        captured = [o.key for o in outcomes if o.captured and o.forward == PASS]
        wall = time.perf_counter() - _RESULTS.started
        hits = sum(o.cache_hits > 0 for o in outcomes)
        write(
            f"  wall time: {wall:.0f} s ({sum(o.seconds for o in outcomes):.0f} s in ops; "
            f"{hits} ops loaded graphs from Inductor's cache)"
        )
        slow = sorted(outcomes, key=lambda o: -o.seconds)[:5]
        write("  slowest: " + ", ".join(f"{o.key} {o.seconds:.1f}s" for o in slow))

        def listing(title: str, rows: list[str]) -> None:
            if rows:
                write(f"{title} ({len(rows)}):")
                for row in rows:
                    write(f"  {row}")

        failing = []
        for o in outcomes:
            for phase in PHASES:
                if getattr(o, phase) == FAIL:
                    x = covering(compile_xfails(o.key), phase, o.dtype)
                    msg = getattr(o, f"{phase}_error").splitlines()[0][:160]
                    tag = "expected" if x else "UNEXPECTED"
                    failing.append(f"{o.key} [{phase}, {tag}]: {msg}")
        listing("Compile failures", failing)
        listing(
            "Excluded: the CPU compile fails too",
            [
                f"{o.key} [{'+'.join(p for p in PHASES if getattr(o, p) == EXCLUDED)}]"
                + (" (CPU failure from torch_neuronx code)" if o.cpu_broken_by_neuronx else "")
                + f": {o.cpu_error.splitlines()[0][:140]}"
                for o in outcomes
                if EXCLUDED in (o.forward, o.backward)
            ],
        )
        listing(
            "Not compiled: Dynamo compiles no graph, on CPU either (run eagerly)",
            [o.key for o in outcomes if o.forward == NOT_COMPILED],
        )
        if captured:
            write(
                f"Compiled with capture_scalar_outputs/capture_dynamic_output_shape_ops "
                f"({len(captured)}): {', '.join(captured)}"
            )
        listing(
            "Stride mismatches (not failures)",
            [f"{o.key}: {o.stride_mismatches[0]}" for o in mism],
        )
        reasons = {}
        for o in outcomes:
            for x in compile_xfails(o.key):
                reasons.setdefault(x.reason, []).append(o.key)
        listing(
            "Expected compile failures",
            [f"{', '.join(keys)}: {reason}" for reason, keys in reasons.items()],
        )


# ---------------------------------------------------------------- the cache warmer


def _progress_path(directory: str) -> str:
    return os.path.join(directory, "started")


def _warm(directory: str) -> None:
    """The helper process: compiles the listed ops from the last one backwards until
    it reaches one the tests have started."""
    with open(os.path.join(directory, "keys")) as f:
        keys = f.read().split()
    by_key = {op_key(op): op for op in OPS}
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1
    for j in range(len(keys) - 1, -1, -1):
        try:
            with open(_progress_path(directory)) as f:
                started = int(f.read() or 0)
        except (OSError, ValueError):
            started = 0
        if started > j:
            return
        with contextlib.suppress(Exception):
            check_op(by_key[keys[j]], warm=True)


@pytest.fixture(scope="module")
def _compile_phase(request):
    """The phase's settings (restored after the module), the summary plugin, and the
    cache warmer."""
    import torch._inductor.config as inductor_config

    mp = pytest.MonkeyPatch()
    mp.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "1")
    # torch's own patch, not MonkeyPatch.setattr: pytest >= 9.2 restores a module
    # attribute by deleting it when it was not in the module's __dict__, which
    # hides a config-module entry (compile_threads "does not exist" afterwards).
    threads = inductor_config.patch(compile_threads=1)
    threads.__enter__()
    if not request.config.pluginmanager.has_plugin("opinfo-compile-summary"):
        request.config.pluginmanager.register(_Summary(), "opinfo-compile-summary")
    _RESULTS.started = time.perf_counter()

    keys = [
        item.callspec.params["op"]
        for item in request.session.items
        if item.module is request.module
        and item.originalname == "test_compile_op"
        and hasattr(item, "callspec")
    ]
    keys = [op_key(op) for op in keys]
    workdir = tempfile.mkdtemp(prefix="opinfo-compile-")
    warmer = None
    if (
        len(keys) >= WARMER_MIN_OPS
        and (os.cpu_count() or 1) >= 2
        and os.environ.get(WARMER_ENV, "1") not in ("", "0")
    ):
        with open(os.path.join(workdir, "keys"), "w") as f:
            f.write("\n".join(keys))
        with open(_progress_path(workdir), "w") as f:
            f.write("0")
        warmer = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--warm", workdir],
            env={**os.environ, "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION": "1"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    state = {"keys": {k: i for i, k in enumerate(keys)}, "dir": workdir}
    try:
        yield state
    finally:
        if warmer is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(warmer.pid, signal.SIGKILL)
            warmer.wait()
        shutil.rmtree(workdir, ignore_errors=True)
        threads.__exit__(None, None, None)
        mp.undo()


def _started(state, key: str) -> None:
    """Tells the warmer the tests have reached ``key``."""
    index = state["keys"].get(key)
    if index is None:
        return
    path = _progress_path(state["dir"])
    with open(path + ".tmp", "w") as f:
        f.write(str(index + 1))
    os.replace(path + ".tmp", path)


# ---------------------------------------------------------------- the tests


@pytest.mark.parametrize("op", SELECTED, ids=[op_key(op) for op in SELECTED])
def test_compile_op(op, _compile_phase):
    key = op_key(op)
    _started(_compile_phase, key)
    if key in COMPILE_SKIP:
        pytest.skip(COMPILE_SKIP[key])
    result = check_op(op)
    _RESULTS.outcomes[key] = result
    if result.why_na:
        pytest.skip(result.why_na)
    xfails = compile_xfails(key)
    failures = [
        (phase, result.dtype, getattr(result, f"{phase}_error"))
        for phase in PHASES
        if getattr(result, phase) in (FAIL, EXCLUDED)
    ]
    unexpected = [
        f for f in failures if getattr(result, f[0]) == FAIL and not covering(xfails, f[0], f[1])
    ]
    if unexpected:
        lines = [f"{phase} ({dtype}): {msg}" for phase, dtype, msg in unexpected]
        pytest.fail("compiled on neuron:\n" + "\n".join(lines), pytrace=False)
    unused = unused_xfails(xfails, PHASES, failures)
    if unused:
        scopes = ", ".join("+".join(x.phases) for x in unused)
        pytest.fail(
            f"XPASS: {key!r} passes [{scopes}] compiled: remove it from "
            "known_failures.COMPILE_EXPECTED_FAILURES",
            pytrace=False,
        )
    if failures:
        reasons = sorted(
            {
                "CPU compile fails too (outside the requirement)"
                if getattr(result, phase) == EXCLUDED
                else covering(xfails, phase, dtype).reason
                for phase, dtype, _ in failures
            }
        )
        pytest.xfail("; ".join(reasons))
    if result.forward == NOT_COMPILED:
        pytest.skip("Dynamo compiles no graph for it, on CPU either")


def test_compile_pass_rate(_compile_phase):
    """>= 95% of the ops that ran (whose CPU compile works) pass, forward and backward.

    Not judged on fewer than ``MIN_RATE_OPS`` ops (a ``-k`` selection of a few ops)."""
    if len(_RESULTS.in_scope("forward")) < MIN_RATE_OPS:
        pytest.skip(f"fewer than {MIN_RATE_OPS} ops ran: no pass rate to judge")
    lines = []
    for phase in PHASES:
        passed, total = _RESULTS.rate(phase)
        if total and passed < MIN_PASS_RATE * total:
            lines.append(
                f"{phase}: {passed}/{total} ops pass ({100.0 * passed / total:.1f}%), "
                f"fewer than {MIN_PASS_RATE:.0%}"
            )
    assert not lines, "; ".join(lines)


if __name__ == "__main__" and sys.argv[1:2] == ["--warm"]:
    _warm(sys.argv[2])
