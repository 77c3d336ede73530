"""Helpers shared by the differential OpInfo tests: moving samples, running, comparing.

The tests themselves live in ``test_opinfo_*.py``; every skip and expected failure is
listed in ``known_failures.py``; ``conftest.py`` collects the counts and prints the
summary.
"""

from __future__ import annotations

import contextlib
import random
import re
import signal
import traceback

import numpy
import torch
from known_failures import EXPECTED_FAILURES, TOLERANCES, XFail
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.opinfo.core import SampleInput

DEVICE = "neuron"
SAMPLE_TIMEOUT_S = 30
# Looser than torch.testing's defaults for the half types, like OpInfo tests.
DEFAULT_TOLERANCES = {
    torch.float16: {"atol": 1e-3, "rtol": 1e-3},
    torch.bfloat16: {"atol": 1e-2, "rtol": 1.6e-2},
    torch.complex32: {"atol": 1e-3, "rtol": 1e-3},
}

OPS = list(op_db)


def op_key(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def expected_failures(key: str) -> tuple[XFail, ...]:
    entry = EXPECTED_FAILURES.get(key)
    if entry is None:
        return ()
    return entry if isinstance(entry, tuple) else (entry,)


def covering(xfails: tuple[XFail, ...], phase: str, dtype: torch.dtype | None) -> XFail | None:
    return next((x for x in xfails if x.covers(phase, dtype)), None)


def unused_xfails(
    xfails: tuple[XFail, ...], phases: tuple[str, ...], failures: list[tuple]
) -> list[XFail]:
    """The entries for ``phases`` that cover none of ``failures`` ((phase, dtype, ...))."""
    return [
        x
        for x in xfails
        if set(x.phases) & set(phases) and not any(x.covers(f[0], f[1]) for f in failures)
    ]


class SampleTimeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: int):
    def handler(signum, frame):
        raise SampleTimeout(f"sample took longer than {seconds}s")

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def sync_and_swallow() -> BaseException | None:
    """Wait for the device; a pending device error is returned, not raised."""
    try:
        torch.neuron.synchronize()
    except Exception as e:
        return e
    return None


# ---------------------------------------------------------------- moving samples


def move_tensor(t: torch.Tensor, device: str) -> torch.Tensor:
    """A copy of ``t`` on ``device`` with the same geometry over a storage of the same size."""
    if t.layout != torch.strided or t.is_meta:
        return t.to(device)
    with torch.no_grad():
        if t.is_contiguous() and t.storage_offset() == 0:
            out = t.detach().to(device, copy=True)
        else:
            n = t.untyped_storage().nbytes() // t.element_size()
            flat = t.detach().as_strided((n,), (1,), 0)
            base = flat.to(device, copy=True)
            out = base.as_strided(t.size(), t.stride(), t.storage_offset())
    if t.requires_grad:
        out.requires_grad_(True)
    return out


def to_neuron_tensor(t: torch.Tensor) -> torch.Tensor:
    return move_tensor(t, DEVICE)


def to_neuron(x):
    if isinstance(x, torch.Tensor):
        return to_neuron_tensor(x)
    if isinstance(x, torch.device) and x.type == "cpu":
        return torch.device(DEVICE)
    if isinstance(x, list):
        return [to_neuron(v) for v in x]
    if isinstance(x, tuple):
        return tuple(to_neuron(v) for v in x)
    if isinstance(x, dict):
        return {k: to_neuron(v) for k, v in x.items()}
    if isinstance(x, str) and x == "cpu":
        return DEVICE  # a device argument
    return x


def neuron_to_cpu(x):
    """The CPU twin of a neuron sample part: neuron tensors and device arguments move."""
    if isinstance(x, torch.Tensor):
        return move_tensor(x, "cpu") if x.device.type == DEVICE else x.clone()
    if isinstance(x, torch.device) and x.type == DEVICE:
        return torch.device("cpu")
    if isinstance(x, list):
        return [neuron_to_cpu(v) for v in x]
    if isinstance(x, tuple):
        return tuple(neuron_to_cpu(v) for v in x)
    if isinstance(x, dict):
        return {k: neuron_to_cpu(v) for k, v in x.items()}
    if isinstance(x, str) and re.fullmatch(rf"{DEVICE}(:\d+)?", x):
        return "cpu"
    return x


# Positional arguments that stay on the CPU, as they do on every device.
CPU_ARGS = {
    "tensor_split": (0,),  # tensor_indices_or_sections must be a CPU tensor
}


def to_neuron_sample(sample: SampleInput, key: str = "") -> SampleInput:
    keep = CPU_ARGS.get(key, ())
    args = tuple(a if i in keep else to_neuron(a) for i, a in enumerate(sample.args))
    return SampleInput(
        to_neuron(sample.input),
        args=args,
        kwargs=to_neuron(sample.kwargs),
        output_process_fn_grad=sample.output_process_fn_grad,
        broadcasts_input=sample.broadcasts_input,
        name=sample.name,
    )


def map_sample(sample: SampleInput, fn) -> SampleInput:
    """A copy of ``sample`` with ``fn`` applied to each of its tensors."""

    def f(x):
        return fn(x) if isinstance(x, torch.Tensor) else x

    tree_map = torch.utils._pytree.tree_map
    return SampleInput(
        tree_map(f, sample.input),
        args=tree_map(f, sample.args),
        kwargs=tree_map(f, sample.kwargs),
        output_process_fn_grad=sample.output_process_fn_grad,
        broadcasts_input=sample.broadcasts_input,
        name=sample.name,
    )


def to_cpu_sample(sample: SampleInput) -> SampleInput:
    """A copy of the sample, so that probing the result's dtypes writes nothing shared."""
    return map_sample(sample, lambda t: t.clone())


def flatten(x) -> list:
    if isinstance(x, (list, tuple)):
        return [y for v in x for y in flatten(v)]
    if isinstance(x, dict):
        return [y for v in x.values() for y in flatten(v)]
    return [x]


def grad_inputs(sample) -> list[torch.Tensor]:
    """The sample's tensors that require grad (the inputs to differentiate)."""
    return [
        t
        for t in flatten([sample.input, sample.args, sample.kwargs])
        if isinstance(t, torch.Tensor) and t.requires_grad
    ]


def grad_outputs(out) -> list[torch.Tensor]:
    """The differentiable (floating or complex, requiring grad) tensors of `out`."""
    return [
        t
        for t in flatten(out)
        if isinstance(t, torch.Tensor)
        and t.requires_grad
        and (t.is_floating_point() or t.is_complex())
    ]


# ---------------------------------------------------------------- comparing


class Mismatch(AssertionError):
    pass


def check_devices(x, where: str = "result") -> None:
    if isinstance(x, torch.Tensor):
        if x.device.type != DEVICE:
            raise Mismatch(f"{where} is on {x.device}, expected {DEVICE}")
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            check_devices(v, f"{where}[{i}]")


def to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    if isinstance(x, (list, tuple)):
        return [to_cpu(v) for v in x]
    return x


def tolerance(key: str, dtype: torch.dtype, extra: dict | None = None) -> dict[str, float]:
    if extra and dtype in extra:
        return extra[dtype]
    override = TOLERANCES.get(key)
    if override and dtype in override.by_dtype:
        return override.by_dtype[dtype]
    return DEFAULT_TOLERANCES.get(dtype, {})


def dense_non_overlapping(t: torch.Tensor) -> bool:
    return t.layout == torch.strided and torch._prims_common.is_non_overlapping_and_dense_or_false(
        t
    )


def significant_strides(t: torch.Tensor) -> tuple[int | None, ...]:
    """The strides that matter: those of dimensions longer than 1 (None for the others)."""
    return tuple(s if n > 1 else None for n, s in zip(t.shape, t.stride(), strict=True))


class Comparison:
    """What one ``compare`` call saw besides the values: the stride checks."""

    def __init__(self) -> None:
        self.strides_compared = 0
        # (where, neuron strides, CPU strides, shape)
        self.stride_mismatches: list[tuple[str, tuple, tuple, list[int]]] = []


def compare(
    actual,
    expected,
    values: bool,
    key: str = "",
    where: str = "result",
    seen: Comparison | None = None,
    tolerances: dict | None = None,
) -> None:
    """``actual``: the neuron result (already on CPU); ``expected``: the CPU one.

    Shapes, dtypes and layouts must match exactly, values within tolerance. Where the
    CPU result is dense and non-overlapping, the strides of its dimensions longer than
    one are compared too: a difference is noted in ``seen`` (not raised), so that the
    caller can count and report it apart from value mismatches. ``tolerances``
    (dtype -> atol/rtol) take precedence over ``known_failures.TOLERANCES``.
    """
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise Mismatch(f"{where}: got {type(actual).__name__}, expected a tensor")
        if actual.shape != expected.shape or actual.dtype != expected.dtype:
            raise Mismatch(
                f"{where}: got {actual.dtype}{list(actual.shape)}, "
                f"expected {expected.dtype}{list(expected.shape)}"
            )
        if actual.layout != expected.layout:
            raise Mismatch(f"{where}: got layout {actual.layout}, expected {expected.layout}")
        if seen is not None and expected.numel() > 1 and dense_non_overlapping(expected):
            seen.strides_compared += 1
            if significant_strides(actual) != significant_strides(expected):
                seen.stride_mismatches.append(
                    (where, actual.stride(), expected.stride(), list(expected.shape))
                )
        if not values:
            return
        tol = tolerance(key, expected.dtype, tolerances)
        if expected.dtype == torch.complex32:  # few CPU kernels take complex32
            actual, expected = actual.to(torch.complex64), expected.to(torch.complex64)
        try:
            torch.testing.assert_close(
                actual,
                expected,
                equal_nan=True,
                check_device=False,
                check_stride=False,
                **tol,
            )
        except AssertionError as e:
            raise Mismatch(f"{where}: {e}") from None
    elif isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise Mismatch(f"{where}: got {actual!r:.200}, expected {expected!r:.200}")
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            compare(a, e, values, key, f"{where}[{i}]", seen, tolerances)
    elif values and not (actual == expected or (actual != actual and expected != expected)):
        raise Mismatch(f"{where}: got {actual!r:.200}, expected {expected!r:.200}")


def short_error(e: BaseException, limit: int = 600) -> str:
    if isinstance(e, Mismatch):
        return str(e).strip()[:limit]
    lines = traceback.format_exception_only(type(e), e)
    return "".join(lines).strip()[:limit]


# ---------------------------------------------------------------- running


@contextlib.contextmanager
def same_draws(value: int = 7):
    """Every run of a sample draws the same numbers: the CPU and neuron generators
    seeded alike (neuron's generator is the CPU's), the caller's streams restored
    afterwards (the samples' own draws go on undisturbed)."""
    with torch.random.fork_rng(devices=[torch.neuron.current_device()], device_type="neuron"):
        torch.manual_seed(value)
        yield


def seed(value: int = 0) -> None:
    torch.manual_seed(value)
    random.seed(value)
    numpy.random.seed(value)


def samples(op, dtype: torch.dtype, requires_grad: bool, device: str = "cpu"):
    """The op's sample inputs, seeded once.

    ``op.sample_inputs_func`` is called directly: ``op.sample_inputs`` wraps it in a
    tracking iterator that inspects the Python stack (``inspect.stack()``) and reseeds
    every generator before each sample, which cost more than most samples take to run.
    """
    seed()
    try:
        it = iter(op.sample_inputs_func(op, device, dtype, requires_grad))
    except Exception:
        return
    while True:
        try:
            with time_limit(SAMPLE_TIMEOUT_S):
                s = next(it, None)
        except Exception:
            return  # a sample generator that fails on CPU is not ours to test
        if s is None:
            return
        yield s


def run_op(op, sample):
    return op(sample.input, *sample.args, **sample.kwargs)
