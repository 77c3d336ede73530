"""Differential OpInfo suite: every op of ``op_db`` on neuron against the same op on CPU.

One test per OpInfo entry. For each tested dtype the CPU samples of the entry
are copied to neuron (same sizes, strides and storage offsets), the op runs on
both devices, and the results must match (and live on neuron). For float32 and
ops with autograd, the input gradients of a random-cotangent backward must
match too. For ops with an out= variant, the first samples also run with out=
tensors (empty ones, resized by the op, as in PyTorch's own out= tests) on both
devices: the outputs written and the values returned must match, and the
returned tensors must be the out= tensors themselves. A sample that raises on
CPU is skipped; one that raises only on neuron is a failure. Skips and expected
failures live in ``known_failures.py``.
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import traceback

import pytest
import torch
from known_failures import (
    EXPECTED_FAILURES,
    NOT_APPLICABLE,
    RANDOM_SAMPLES,
    SKIP,
    TOLERANCES,
    VALUE_NOT_COMPARABLE,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.opinfo.core import SampleInput

DEVICE = "neuron"
MAX_SAMPLES = 8
MAX_OUT_SAMPLES = 2  # per op, in its first dtype
SAMPLE_TIMEOUT_S = 30
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.bool)
BACKWARD_DTYPE = torch.float32
# Looser than torch.testing's defaults for the half types, like OpInfo tests.
DEFAULT_TOLERANCES = {
    torch.float16: {"atol": 1e-3, "rtol": 1e-3},
    torch.bfloat16: {"atol": 1e-2, "rtol": 1.6e-2},
    torch.complex32: {"atol": 1e-3, "rtol": 1e-3},
}


def op_key(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def dtypes_for(op) -> list[torch.dtype]:
    supported = op.supported_dtypes("cpu")
    dtypes = [d for d in DTYPES if d in supported]
    if torch.int64 not in supported and torch.int32 in supported:
        dtypes.append(torch.int32)
    if not dtypes and supported:
        # Complex-only (or otherwise exotic) ops: test one dtype they have.
        dtypes.append(sorted(supported, key=str)[0])
    return dtypes


OPS = list(op_db)


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


# ---------------------------------------------------------------- moving samples


def to_neuron_tensor(t: torch.Tensor) -> torch.Tensor:
    """A neuron copy of ``t`` with the same geometry over a storage of the same size."""
    if t.layout != torch.strided or t.is_meta:
        return t.to(DEVICE)
    with torch.no_grad():
        if t.is_contiguous() and t.storage_offset() == 0:
            out = t.detach().to(DEVICE, copy=True)
        else:
            n = t.untyped_storage().nbytes() // t.element_size()
            flat = t.detach().as_strided((n,), (1,), 0)
            base = flat.to(DEVICE, copy=True)
            out = base.as_strided(t.size(), t.stride(), t.storage_offset())
    if t.requires_grad:
        out.requires_grad_(True)
    return out


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


def flatten(x) -> list:
    if isinstance(x, (list, tuple)):
        return [y for v in x for y in flatten(v)]
    if isinstance(x, dict):
        return [y for v in x.values() for y in flatten(v)]
    return [x]


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


def tolerance(key: str, dtype: torch.dtype) -> dict[str, float]:
    override = TOLERANCES.get(key)
    if override and dtype in override.by_dtype:
        return override.by_dtype[dtype]
    return DEFAULT_TOLERANCES.get(dtype, {})


def compare(actual, expected, values: bool, key: str = "", where: str = "result") -> None:
    """``actual``: the neuron result (already on CPU); ``expected``: the CPU one."""
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
        if not values:
            return
        try:
            torch.testing.assert_close(
                actual,
                expected,
                equal_nan=True,
                check_device=False,
                check_stride=False,
                **tolerance(key, expected.dtype),
            )
        except AssertionError as e:
            raise Mismatch(f"{where}: {e}") from None
    elif isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise Mismatch(f"{where}: got {actual!r:.200}, expected {expected!r:.200}")
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            compare(a, e, values, key, f"{where}[{i}]")
    elif values and not (actual == expected or (actual != actual and expected != expected)):
        raise Mismatch(f"{where}: got {actual!r:.200}, expected {expected!r:.200}")


def short_error(e: BaseException) -> str:
    if isinstance(e, Mismatch):
        return str(e).strip()[:600]
    lines = traceback.format_exception_only(type(e), e)
    return "".join(lines).strip()[:600]


# ---------------------------------------------------------------- running


def samples(op, dtype: torch.dtype, requires_grad: bool):
    torch.manual_seed(0)
    it = iter(op.sample_inputs("cpu", dtype, requires_grad=requires_grad))
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


def run_forward(op, key: str, sample, values: bool) -> str | None:
    """None if the sample matches, "skip" if CPU raises, else the failure message."""
    dev = to_neuron_sample(sample, key)  # before the CPU run: the op may write to its inputs
    try:
        with time_limit(SAMPLE_TIMEOUT_S):
            expected = run_op(op, sample)
    except Exception:
        return "skip"
    try:
        with time_limit(SAMPLE_TIMEOUT_S):
            actual = run_op(op, dev)
            torch.neuron.synchronize()
            check_devices(actual)
            compare(to_cpu(actual), to_cpu(expected), values, key)
    except Exception as e:
        return short_error(e)
    return None


def empty_like_result(x, device: str):
    """Empty out= tensors for a result: a tensor, or a tuple/list of them."""
    if isinstance(x, torch.Tensor):
        return torch.empty(0, dtype=x.dtype, device=device)
    if isinstance(x, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in x):
        return tuple(torch.empty(0, dtype=v.dtype, device=device) for v in x)
    return None


def run_out(op, key: str, sample, values: bool) -> str | None:
    """The op with out= tensors: None if it matches CPU, "skip" if CPU cannot run it."""
    dev = to_neuron_sample(sample, key)
    try:
        with time_limit(SAMPLE_TIMEOUT_S):
            out_cpu = empty_like_result(run_op(op, to_cpu_sample(sample)), "cpu")
            if out_cpu is None:
                return "skip"
            expected = op(sample.input, *sample.args, **sample.kwargs, out=out_cpu)
    except Exception:
        return "skip"
    out_dev = empty_like_result(out_cpu, DEVICE)
    try:
        with time_limit(SAMPLE_TIMEOUT_S):
            actual = op(dev.input, *dev.args, **dev.kwargs, out=out_dev)
            torch.neuron.synchronize()
            check_devices(out_dev, "out")
            compare(to_cpu(out_dev), to_cpu(out_cpu), values, key, "out")
            if expected is None:  # ops writing a list of outputs return nothing
                if actual is not None:
                    raise Mismatch(f"returned: got {type(actual).__name__}, expected None")
                return None
            returned = actual if isinstance(actual, (tuple, list)) else (actual,)
            written = out_dev if isinstance(out_dev, tuple) else (out_dev,)
            if len(returned) != len(written) or not all(
                r is w for r, w in zip(returned, written, strict=True)
            ):
                raise Mismatch("out: the op did not return its out= tensors")
            compare(to_cpu(actual), to_cpu(expected), values, key, "returned")
    except Exception as e:
        return short_error(e)
    return None


def to_cpu_sample(sample: SampleInput) -> SampleInput:
    """A copy of the sample, so that probing the result's dtypes writes nothing shared."""
    clone = lambda x: x.clone() if isinstance(x, torch.Tensor) else x  # noqa: E731
    return SampleInput(
        torch.utils._pytree.tree_map(clone, sample.input),
        args=torch.utils._pytree.tree_map(clone, sample.args),
        kwargs=torch.utils._pytree.tree_map(clone, sample.kwargs),
    )


def grad_inputs(sample) -> list[torch.Tensor]:
    return [
        t
        for t in flatten([sample.input, sample.args, sample.kwargs])
        if isinstance(t, torch.Tensor) and t.requires_grad
    ]


def grad_outputs(out) -> list[torch.Tensor]:
    return [
        t
        for t in flatten(out)
        if isinstance(t, torch.Tensor)
        and t.requires_grad
        and (t.is_floating_point() or t.is_complex())
    ]


def backward(op, sample, cotangents=None):
    out = sample.output_process_fn_grad(run_op(op, sample))
    outs = grad_outputs(out)
    ins = grad_inputs(sample)
    if not outs or not ins:
        return None, None
    if cotangents is None:
        gen = torch.Generator().manual_seed(1)
        cotangents = [torch.randn(o.shape, dtype=o.dtype, generator=gen) for o in outs]
    cots = [c.to(o.device) for c, o in zip(cotangents, outs, strict=True)]
    grads = torch.autograd.grad(outs, ins, cots, allow_unused=True)
    return grads, cotangents


def run_backward(op, key: str, sample) -> str | None:
    dev = to_neuron_sample(sample, key)
    try:
        with time_limit(SAMPLE_TIMEOUT_S):
            expected, cots = backward(op, sample)
    except Exception:
        return "skip"
    if expected is None:
        return "skip"
    try:
        with time_limit(SAMPLE_TIMEOUT_S):
            actual, _ = backward(op, dev, cots)
            torch.neuron.synchronize()
            check_devices([g for g in actual if g is not None], "grad")
            for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
                if (a is None) != (e is None):
                    raise Mismatch(f"grad[{i}]: got {a is None and 'None'}, expected {e}")
                if e is not None:
                    compare(a.cpu(), e, True, key, f"grad[{i}]")
    except Exception as e:
        return short_error(e)
    return None


@pytest.mark.parametrize("op", OPS, ids=[op_key(op) for op in OPS])
def test_differential(op, differential_results):
    key = op_key(op)
    dtypes = dtypes_for(op)
    if not dtypes:
        differential_results.not_applicable[key] = "OpInfo lists no CPU dtype"
        pytest.skip("OpInfo lists no CPU dtype")
    if key in NOT_APPLICABLE:
        differential_results.not_applicable[key] = NOT_APPLICABLE[key]
        pytest.skip(NOT_APPLICABLE[key])
    result = differential_results.op(key)
    if key in SKIP:
        pytest.skip(SKIP[key])
    values = key not in VALUE_NOT_COMPARABLE
    random_samples = RANDOM_SAMPLES.get(key)

    def comparable(sample) -> bool:
        return values and not (random_samples and random_samples.is_random(sample))

    xfail = EXPECTED_FAILURES.get(key)

    failures: list[tuple[str, torch.dtype, str]] = []  # (phase, dtype, message)

    def record(phase: str, dtype: torch.dtype, outcome: str | None) -> None:
        if outcome is None:
            result.passed[phase] += 1
        elif outcome == "skip":
            result.skipped[phase] += 1
        else:
            result.failed[phase] += 1
            if xfail and xfail.covers(phase, dtype):
                result.expected[phase] += 1
            failures.append((phase, dtype, outcome))

    for dtype in dtypes:
        for sample in itertools.islice(samples(op, dtype, False), MAX_SAMPLES):
            record("forward", dtype, run_forward(op, key, sample, comparable(sample)))

    if op.supports_out:
        out_dtype = dtypes[0]
        for sample in itertools.islice(samples(op, out_dtype, False), MAX_OUT_SAMPLES):
            record("out", out_dtype, run_out(op, key, sample, comparable(sample)))

    if (
        values
        and op.supports_autograd
        and BACKWARD_DTYPE in dtypes
        and BACKWARD_DTYPE in op.supported_backward_dtypes("cpu")
    ):
        for sample in itertools.islice(samples(op, BACKWARD_DTYPE, True), MAX_SAMPLES):
            if comparable(sample):
                record("backward", BACKWARD_DTYPE, run_backward(op, key, sample))
            else:
                record("backward", BACKWARD_DTYPE, "skip")

    unexpected = [f for f in failures if not (xfail and xfail.covers(f[0], f[1]))]
    if unexpected:
        lines = [f"{phase} {dtype}: {msg}" for phase, dtype, msg in unexpected[:4]]
        pytest.fail(f"{len(unexpected)} failing sample(s):\n" + "\n".join(lines), pytrace=False)
    if xfail:
        if failures:
            pytest.xfail(xfail.reason)
        pytest.fail(f"XPASS: remove {key!r} from known_failures.EXPECTED_FAILURES", pytrace=False)
    if result.passed["forward"] == 0:
        pytest.skip("no sample ran on CPU")
