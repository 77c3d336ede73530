"""Error inputs: every ``ErrorInput`` of ``op_db`` must raise on neuron at the call, as on CUDA.

For each op with ``error_inputs_func``, the error inputs are made for the neuron device
(or, if the generator cannot, made on CPU and moved the way the differential suite
moves samples). Each one runs on CPU first: if the CPU does not raise the expected
error either (an error input for CUDA only), it is skipped. On neuron the op is
called without any synchronisation and classified:

- ``at-call-ok``: raised at the call, the expected type, a message matching the regex;
- ``at-call-wrong-type`` / ``at-call-wrong-message``: raised at the call, but not that;
- ``late``: did not raise at the call; ``torch.neuron.synchronize()`` then raised;
- ``never``: raised neither at the call nor at the synchronisation.

Any device error left behind is swallowed so that the next error input starts clean.
An op passes if every error input is ``at-call-ok``; failing ops in the scope of a
``known_failures`` entry for the "errors" phase are expected.
"""

from __future__ import annotations

import re
import warnings

import pytest
from known_failures import NOT_APPLICABLE, SKIP
from opinfo_common import (
    DEVICE,
    OPS,
    SAMPLE_TIMEOUT_S,
    covering,
    expected_failures,
    neuron_to_cpu,
    op_key,
    run_op,
    seed,
    sync_and_swallow,
    time_limit,
    to_neuron_sample,
)
from torch.testing._internal.opinfo.core import SampleInput

ERROR_OPS = [op for op in OPS if op.error_inputs_func is not None]
CLASSES = ("at-call-ok", "at-call-wrong-type", "at-call-wrong-message", "late", "never")


def describe(e: BaseException) -> str:
    return (
        f"{type(e).__name__} {str(e).strip().splitlines()[0][:160]!r}"
        if str(e)
        else (type(e).__name__)
    )


def matches(e: BaseException, error_type, error_regex: str) -> bool:
    return isinstance(e, error_type) and re.search(error_regex, str(e)) is not None


def error_inputs(op, key: str) -> tuple[list, list, str]:
    """(neuron error inputs, their CPU twins, how they were made)."""
    # op.error_inputs_func directly: op.error_inputs wraps it in a tracking iterator
    # that inspects the Python stack for every input (see opinfo_common.samples).
    seed()
    try:
        with time_limit(SAMPLE_TIMEOUT_S):
            neuron = list(op.error_inputs_func(op, DEVICE))
            sync_and_swallow()
            cpu = [
                SampleInput(
                    neuron_to_cpu(ei.sample_input.input),
                    args=neuron_to_cpu(ei.sample_input.args),
                    kwargs=neuron_to_cpu(ei.sample_input.kwargs),
                )
                for ei in neuron
            ]
        return neuron, cpu, f"made on {DEVICE}"
    except Exception:
        sync_and_swallow()
    seed()
    with time_limit(SAMPLE_TIMEOUT_S):
        on_cpu = list(op.error_inputs_func(op, "cpu"))
    moved = []
    for ei in on_cpu:
        ei_dev = type(ei)(
            to_neuron_sample(ei.sample_input, key),
            error_type=ei.error_type,
            error_regex=ei.error_regex,
        )
        moved.append(ei_dev)
    return moved, [ei.sample_input for ei in on_cpu], "made on cpu, moved"


def classify(op, ei) -> tuple[str, str]:
    """(class, what neuron did) for one error input, with the device clean afterwards."""
    si = ei.sample_input
    sync_and_swallow()
    try:
        with time_limit(SAMPLE_TIMEOUT_S):
            try:
                run_op(op, si)
            except Exception as e:
                sync_and_swallow()
                if not isinstance(e, ei.error_type):
                    return "at-call-wrong-type", describe(e)
                if re.search(ei.error_regex, str(e)) is None:
                    return "at-call-wrong-message", describe(e)
                return "at-call-ok", ""
            late = sync_and_swallow()
    except Exception as e:  # the time limit
        sync_and_swallow()
        return "never", f"timed out: {describe(e)}"
    if late is not None:
        return "late", describe(late)
    return "never", "no error"


@pytest.mark.parametrize("op", ERROR_OPS, ids=[op_key(op) for op in ERROR_OPS])
def test_error_inputs(op, differential_results):
    key = op_key(op)
    if key in SKIP:
        pytest.skip(SKIP[key])
    if key in NOT_APPLICABLE:
        pytest.skip(NOT_APPLICABLE[key])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        neuron, cpu, how = error_inputs(op, key)
        rows = []  # (class, expected, what neuron did)
        skipped = 0
        for ei, cpu_sample in zip(neuron, cpu, strict=True):
            expect = f"{ei.error_type.__name__} {ei.error_regex!r}"
            try:
                with time_limit(SAMPLE_TIMEOUT_S):
                    run_op(op, cpu_sample)
                cpu_raises = False
            except Exception as e:
                cpu_raises = matches(e, ei.error_type, ei.error_regex)
            if not cpu_raises:
                skipped += 1  # CUDA-only error input: the CPU does not raise it either
                continue
            cls, got = classify(op, ei)
            rows.append((cls, expect, got))
    differential_results.error_op(key, rows, skipped, how)
    bad = [r for r in rows if r[0] != "at-call-ok"]
    xfail = covering(expected_failures(key), "errors", None)
    if bad and not xfail:
        lines = [f"{cls}: expected {expect}, got {got}" for cls, expect, got in bad[:6]]
        pytest.fail(
            f"{len(bad)} of {len(rows)} error input(s) not raised at the call:\n"
            + "\n".join(lines),
            pytrace=False,
        )
    if xfail and not bad:
        pytest.fail(
            f"XPASS: {key!r} raises every error at the call: remove its 'errors' entry from "
            "known_failures.EXPECTED_FAILURES",
            pytrace=False,
        )
    if xfail:
        pytest.xfail(xfail.reason)
    if not rows:
        pytest.skip("no error input raises on CPU")
