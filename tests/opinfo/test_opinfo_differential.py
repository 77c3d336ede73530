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

Results must match in shape, dtype and layout exactly, in values within tolerance,
and, where the CPU result is dense and non-overlapping, in the strides of its
dimensions longer than one (phase "strides": counted apart; ops whose strides
legitimately differ are listed in ``known_failures.STRIDE_DIFFERENCES``).

Phase "zero_dim": elementwise ops (unary/binary ufuncs), reductions and losses whose
samples have no 0-d input (losses: none with reduction='none') also run samples
derived from their first ones: every tensor 0-d, and for losses the first
reduction='none' sample unbatched too (see ``zero_dim_samples``).

The CUDA dtype parity ("dtypes") and error-input ("errors") phases live in
``test_opinfo_dtypes.py`` and ``test_opinfo_errors.py``.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from known_failures import (
    NOT_APPLICABLE,
    RANDOM_OPS,
    SKIP,
    STRIDE_DIFFERENCES,
    VALUE_NOT_COMPARABLE,
)
from opinfo_common import (
    DEVICE,
    OPS,
    SAMPLE_TIMEOUT_S,
    Comparison,
    Mismatch,
    check_devices,
    compare,
    covering,
    expected_failures,
    grad_inputs,
    grad_outputs,
    map_sample,
    op_key,
    run_op,
    same_draws,
    samples,
    short_error,
    time_limit,
    to_cpu,
    to_cpu_sample,
    to_neuron_sample,
    unused_xfails,
)
from torch.testing._internal.common_methods_invocations import (
    binary_ufuncs,
    reduction_ops,
    unary_ufuncs,
)
from torch.testing._internal.opinfo.core import SampleInput

MAX_SAMPLES = 8
MAX_OUT_SAMPLES = 2  # per op, in its first dtype
MAX_ZERO_DIM_SCAN = 64  # samples looked at for a 0-d one
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.bool)
BACKWARD_DTYPE = torch.float32
SAMPLE_PHASES = ("forward", "backward", "out", "zero_dim")


def dtypes_for(op) -> list[torch.dtype]:
    supported = op.supported_dtypes("cpu")
    dtypes = [d for d in DTYPES if d in supported]
    if torch.int64 not in supported and torch.int32 in supported:
        dtypes.append(torch.int32)
    if not dtypes and supported:
        # Complex-only (or otherwise exotic) ops: test one dtype they have.
        dtypes.append(sorted(supported, key=str)[0])
    return dtypes


# ---------------------------------------------------------------- running


def run_forward(op, key: str, sample, values: bool, seen: Comparison) -> str | None:
    """None if the sample matches, "skip" if CPU raises, else the failure message."""
    dev = to_neuron_sample(sample, key)  # before the CPU run: the op may write to its inputs
    try:
        with time_limit(SAMPLE_TIMEOUT_S), same_draws():
            expected = run_op(op, sample)
    except Exception:
        return "skip"
    try:
        with time_limit(SAMPLE_TIMEOUT_S):
            with same_draws():
                actual = run_op(op, dev)
            torch.neuron.synchronize()
            check_devices(actual)
            compare(to_cpu(actual), to_cpu(expected), values, key, seen=seen)
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


def run_out(op, key: str, sample, values: bool, seen: Comparison) -> str | None:
    """The op with out= tensors: None if it matches CPU, "skip" if CPU cannot run it."""
    dev = to_neuron_sample(sample, key)
    try:
        with time_limit(SAMPLE_TIMEOUT_S):
            out_cpu = empty_like_result(run_op(op, to_cpu_sample(sample)), "cpu")
            if out_cpu is None:
                return "skip"
            with same_draws():
                expected = op(sample.input, *sample.args, **sample.kwargs, out=out_cpu)
    except Exception:
        return "skip"
    out_dev = empty_like_result(out_cpu, DEVICE)
    try:
        with time_limit(SAMPLE_TIMEOUT_S):
            with same_draws():
                actual = op(dev.input, *dev.args, **dev.kwargs, out=out_dev)
            torch.neuron.synchronize()
            check_devices(out_dev, "out")
            compare(to_cpu(out_dev), to_cpu(out_cpu), values, key, "out", seen)
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


def backward(op, sample, cotangents=None):
    with same_draws():
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


def run_backward(op, key: str, sample, seen: Comparison) -> str | None:
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
                    compare(a.cpu(), e, True, key, f"grad[{i}]", seen)
    except Exception as e:
        return short_error(e)
    return None


# ---------------------------------------------------------------- 0-d samples

UNARY_UFUNCS = {op_key(op) for op in unary_ufuncs}
BINARY_UFUNCS = {op_key(op) for op in binary_ufuncs}
REDUCTIONS = {op_key(op) for op in reduction_ops}
LOSSES = {
    op_key(op)
    for op in OPS
    if op.name.startswith("nn.functional.")
    and (
        op.name.endswith("_loss")
        or op.name.removeprefix("nn.functional.")
        in ("kl_div", "cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits")
    )
}


def zero_dim_kind(key: str) -> str | None:
    if key in UNARY_UFUNCS or key in BINARY_UFUNCS:
        return "elementwise"
    if key in REDUCTIONS:
        return "reduction"
    if key in LOSSES:
        return "loss"
    return None


def scalar_of(t: torch.Tensor, zero: bool = False) -> torch.Tensor:
    """A 0-d tensor: the first element of ``t`` (or 0), same dtype."""
    with torch.no_grad():
        if zero or t.numel() == 0:
            return torch.zeros((), dtype=t.dtype)
        return t.detach().reshape(-1)[0].clone()


def unbatched(t: torch.Tensor) -> torch.Tensor:
    return t.detach()[0].clone() if t.dim() > 0 and t.shape[0] > 0 else t


def has_zero_dim_sample(op, dtype: torch.dtype, loss: bool) -> bool:
    """Whether the op's samples have a 0-d input (for losses: with reduction='none')."""
    return any(
        isinstance(s.input, torch.Tensor)
        and s.input.dim() == 0
        and (not loss or s.kwargs.get("reduction") == "none")
        for s in itertools.islice(samples(op, dtype, False), MAX_ZERO_DIM_SCAN)
    )


def zero_dim_samples(op, key: str, dtype: torch.dtype) -> list[SampleInput]:
    """Samples derived from the op's first ones, for ops whose samples have no 0-d input.

    Elementwise ops: every tensor 0-d (binary ops also: a 0-d input with the other
    operands as they were). Reductions: a 0-d input alone and with the first sample's
    arguments. Losses (reduction='none'): every tensor 0-d (integer targets 0, valid
    for any class count), and the first sample unbatched (every tensor's first row).
    """
    kind = zero_dim_kind(key)
    if kind is None or has_zero_dim_sample(op, dtype, kind == "loss"):
        return []
    found = list(itertools.islice(samples(op, dtype, False), MAX_SAMPLES))
    if not found or not isinstance(found[0].input, torch.Tensor):
        return []
    first = found[0]
    if kind == "elementwise":
        out = [map_sample(first, scalar_of)]
        if key in BINARY_UFUNCS:
            out.append(SampleInput(scalar_of(first.input), args=first.args, kwargs=first.kwargs))
        return out
    if kind == "reduction":
        return [SampleInput(scalar_of(first.input)), map_sample(first, scalar_of)]
    none = [s for s in found if s.kwargs.get("reduction") == "none"]
    some = none[0] if none else first
    base = SampleInput(some.input, args=some.args, kwargs={**some.kwargs, "reduction": "none"})

    def zero_d(t: torch.Tensor) -> torch.Tensor:
        integer_target = t is not base.input and not (t.is_floating_point() or t.is_complex())
        return scalar_of(t, zero=integer_target)

    out = [map_sample(base, zero_d)]
    if base.input.dim() >= 2:
        out.append(map_sample(base, unbatched))
    return out


# ---------------------------------------------------------------- the test


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
    # Random ops and samples are compared too: both runs draw the same numbers
    # (same_draws).
    values = key not in VALUE_NOT_COMPARABLE or key in RANDOM_OPS

    def comparable(sample) -> bool:
        return values

    xfails = expected_failures(key)

    failures: list[tuple[str, torch.dtype, str]] = []  # (phase, dtype, message)

    def record(phase: str, dtype: torch.dtype, outcome: str | None, seen: Comparison) -> None:
        if outcome is None:
            result.passed[phase] += 1
        elif outcome == "skip":
            result.skipped[phase] += 1
        else:
            result.failed[phase] += 1
            if covering(xfails, phase, dtype):
                result.expected[phase] += 1
            failures.append((phase, dtype, outcome))
            result.failures.append((phase, dtype, outcome))
        result.strides_compared += seen.strides_compared
        for where, got, want, shape in seen.stride_mismatches:
            msg = f"{phase} {where} {shape}: strides {list(got)}, CPU {list(want)}"
            result.stride_mismatches.append(msg)
            if key not in STRIDE_DIFFERENCES:
                failures.append(("strides", dtype, msg))

    def run(phase: str, dtype: torch.dtype, fn, *args) -> None:
        seen = Comparison()
        record(phase, dtype, fn(*args, seen), seen)

    for dtype in dtypes:
        for sample in itertools.islice(samples(op, dtype, False), MAX_SAMPLES):
            run("forward", dtype, run_forward, op, key, sample, comparable(sample))

    for sample in zero_dim_samples(op, key, dtypes[0]):
        run("zero_dim", dtypes[0], run_forward, op, key, sample, comparable(sample))

    if op.supports_out:
        out_dtype = dtypes[0]
        for sample in itertools.islice(samples(op, out_dtype, False), MAX_OUT_SAMPLES):
            run("out", out_dtype, run_out, op, key, sample, comparable(sample))

    if (
        values
        and op.supports_autograd
        and BACKWARD_DTYPE in dtypes
        and BACKWARD_DTYPE in op.supported_backward_dtypes("cpu")
    ):
        for sample in itertools.islice(samples(op, BACKWARD_DTYPE, True), MAX_SAMPLES):
            if comparable(sample):
                run("backward", BACKWARD_DTYPE, run_backward, op, key, sample)
            else:
                record("backward", BACKWARD_DTYPE, "skip", Comparison())

    phases = (*SAMPLE_PHASES, "strides")
    unexpected = [f for f in failures if not covering(xfails, f[0], f[1])]
    if unexpected:
        lines = [f"{phase} {dtype}: {msg}" for phase, dtype, msg in unexpected[:4]]
        pytest.fail(f"{len(unexpected)} failing sample(s):\n" + "\n".join(lines), pytrace=False)
    unused = unused_xfails(xfails, phases, failures)
    if unused:
        scopes = ", ".join("+".join(x.phases) for x in unused)
        pytest.fail(
            f"XPASS: {key!r} passes [{scopes}]: remove it from known_failures.EXPECTED_FAILURES",
            pytrace=False,
        )
    if key in STRIDE_DIFFERENCES and not result.stride_mismatches:
        pytest.fail(
            f"XPASS: {key!r} strides match: remove it from known_failures.STRIDE_DIFFERENCES",
            pytrace=False,
        )
    if failures:
        pytest.xfail("; ".join(sorted({covering(xfails, f[0], f[1]).reason for f in failures})))
    if result.passed["forward"] == 0:
        pytest.skip("no sample ran on CPU")
