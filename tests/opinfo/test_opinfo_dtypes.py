"""CUDA dtype parity: every op of ``op_db`` in every dtype CUDA takes, on neuron.

For each op and each dtype of ``op.supported_dtypes("cuda")`` (OpInfo's dtypesIfCUDA),
the first samples run on neuron and are checked against a reference:

- the CPU result in that dtype, if the CPU supports it;
- otherwise (the CPU kernel raises in that dtype) the CPU run of the same sample with
  its inputs of that dtype widened (float16/bfloat16 -> float32, complex32 ->
  complex64, bool/integers -> int64, else float64; the next wider one if the CPU
  cannot run that either), the results cast back to the dtypes the op returns for the
  CUDA dtype (the op's Meta kernel tells them), compared with the half tolerances
  (for complex32 those of PyTorch's own complex32-vs-complex64 reference test);
- if even that cannot run on CPU, the pair has no reference (counted, not failed).

Sample generators that cannot make a dtype on CPU make the samples in the wider dtype,
which are then cast to the dtype. Each (op, dtype) pair passes, fails, or has no
reference; failing pairs in the scope of a ``known_failures`` entry for the "dtypes"
phase are expected.
"""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch
from known_failures import NOT_APPLICABLE, RANDOM_SAMPLES, SKIP, VALUE_NOT_COMPARABLE
from opinfo_common import (
    OPS,
    SAMPLE_TIMEOUT_S,
    check_devices,
    compare,
    covering,
    dtype_name,
    expected_failures,
    map_sample,
    op_key,
    run_op,
    samples,
    short_error,
    time_limit,
    to_cpu,
    to_neuron_sample,
)
from torch.testing._internal.common_device_type import toleranceOverride

DTYPE_SAMPLES = 2  # samples compared per (op, dtype)
MAX_TRIES = 4  # samples tried to find DTYPE_SAMPLES that the reference can run

INTEGRAL = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
WIDER: dict[torch.dtype, tuple[torch.dtype, ...]] = {
    torch.float16: (torch.float32, torch.float64),
    torch.bfloat16: (torch.float32, torch.float64),
    torch.float32: (torch.float64,),
    torch.complex32: (torch.complex64, torch.complex128),
    torch.complex64: (torch.complex128,),
    **{d: (torch.int64, torch.float64, torch.float32) for d in INTEGRAL},
}


class NoReference(Exception):
    pass


def cast_sample(sample, src: torch.dtype, dst: torch.dtype):
    """The sample with its tensors of dtype ``src`` cast to ``dst`` (geometry kept if dense)."""
    return map_sample(sample, lambda t: t.detach().to(dst) if t.dtype == src else t)


def meta_dtypes(op, sample):
    """The dtypes of the op's results for this sample, from its Meta kernel (or None)."""

    def meta(t: torch.Tensor) -> torch.Tensor:
        if t.layout != torch.strided:
            raise NoReference("not strided")
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")

    def dtypes_of(x):
        if isinstance(x, torch.Tensor):
            return x.dtype
        if isinstance(x, (list, tuple)):
            return [dtypes_of(v) for v in x]
        return None

    try:
        m = map_sample(sample, meta)
        m.kwargs = {k: "meta" if v == "cpu" else v for k, v in m.kwargs.items()}
        with time_limit(SAMPLE_TIMEOUT_S):
            return dtypes_of(run_op(op, m))
    except Exception:
        return None


def cast_result(x, dtypes, src: torch.dtype, dst: torch.dtype):
    """Results of the widened run, cast to the CUDA dtypes (``dtypes``: Meta's answer)."""
    if isinstance(x, torch.Tensor):
        if isinstance(dtypes, torch.dtype):
            return x.to(dtypes)
        return x.to(dst) if x.dtype == src else x  # no Meta answer: undo the widening
    if isinstance(x, (list, tuple)):
        ds = dtypes if isinstance(dtypes, list) and len(dtypes) == len(x) else [None] * len(x)
        return type(x)(cast_result(v, d, src, dst) for v, d in zip(x, ds, strict=True))
    return x


def reference(op, sample, dtype: torch.dtype, cpu_ok: bool):
    """(result, how): the CPU result in ``dtype``, or the widened run cast back.

    A dtype that OpInfo does not list for the CPU is tried on the CPU as it is first
    (variants such as batch_norm.without_cudnn list no CPU dtype at all), then in each
    wider dtype in turn.
    """
    try:
        with time_limit(SAMPLE_TIMEOUT_S):
            return run_op(op, sample), "cpu"
    except Exception as e:
        if cpu_ok:
            raise NoReference(f"CPU raises: {short_error(e, 200)}") from None
        why = short_error(e, 200)
    target = None
    for wide in WIDER.get(dtype, ()):
        if target is None:
            target = meta_dtypes(op, sample)
        try:
            with time_limit(SAMPLE_TIMEOUT_S):
                result = run_op(op, cast_sample(sample, dtype, wide))
        except Exception as e:
            why = short_error(e, 200)
            continue
        return cast_result(result, target, wide, dtype), f"cpu {dtype_name(wide)}"
    raise NoReference(f"CPU raises in {dtype_name(dtype)} and every wider dtype: {why}")


def half_reference_tolerances(op, dtype: torch.dtype) -> dict | None:
    """For a complex32 pair checked against complex64: the tolerances of PyTorch's own
    complex32-vs-complex64 test of this op (``TestCommon.test_complex_half_reference_testing``),
    for every result (that test applies them to real results such as hfft's too)."""
    if dtype != torch.complex32:
        return None
    for info in op.decorators:
        if getattr(info, "test_name", None) != "test_complex_half_reference_testing":
            continue
        if getattr(info, "device_type", None) not in (None, "cuda"):
            continue
        for d in info.decorators:
            if isinstance(d, toleranceOverride) and torch.complex32 in d.d:
                tol = {"atol": d.d[torch.complex32].atol, "rtol": d.d[torch.complex32].rtol}
                return {torch.complex32: tol, torch.float16: tol}
    return None


def dtype_samples(op, dtype: torch.dtype):
    """The op's first samples in ``dtype``; made in a wider dtype and cast if CPU cannot."""
    made = False
    for sample in itertools.islice(samples(op, dtype, False), MAX_TRIES):
        made = True
        yield sample
    if made:
        return
    for wide in WIDER.get(dtype, ()):
        for sample in itertools.islice(samples(op, wide, False), MAX_TRIES):
            made = True
            yield cast_sample(sample, wide, dtype)
        if made:
            return


def run_pair(op, key: str, dtype: torch.dtype, values: bool) -> tuple[str, str]:
    """("pass" | "fail" | "no_ref", message) for one (op, dtype) pair."""
    cpu_ok = dtype in op.supported_dtypes("cpu")
    random_samples = RANDOM_SAMPLES.get(key)
    compared, no_ref = 0, "no sample"
    for sample in dtype_samples(op, dtype):
        if compared == DTYPE_SAMPLES:
            break
        dev = to_neuron_sample(sample, key)  # before the CPU run: ops may write to inputs
        try:
            expected, how = reference(op, sample, dtype, cpu_ok)
        except NoReference as e:
            no_ref = str(e)
            continue
        comparable = values and not (random_samples and random_samples.is_random(sample))
        try:
            with time_limit(SAMPLE_TIMEOUT_S):
                actual = run_op(op, dev)
                torch.neuron.synchronize()
                check_devices(actual)
                extra = half_reference_tolerances(op, dtype) if how != "cpu" else None
                compare(to_cpu(actual), to_cpu(expected), comparable, key, tolerances=extra)
        except Exception as e:
            return "fail", f"[vs {how}] {short_error(e, 300)}"
        compared += 1
    if compared == 0:
        return "no_ref", no_ref
    return "pass", ""


@pytest.mark.parametrize("op", OPS, ids=[op_key(op) for op in OPS])
def test_dtype_parity(op, differential_results):
    key = op_key(op)
    if key in SKIP:
        pytest.skip(SKIP[key])
    cuda_dtypes = sorted(op.supported_dtypes("cuda"), key=str)
    if not cuda_dtypes:
        pytest.skip("OpInfo lists no CUDA dtype")
    values = key not in VALUE_NOT_COMPARABLE
    xfails = expected_failures(key)
    failures: list[tuple[str, torch.dtype, str]] = []
    for dtype in cuda_dtypes:
        if key in NOT_APPLICABLE:
            outcome, msg = "no_ref", NOT_APPLICABLE[key]
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # ComplexHalf is experimental, ...
                outcome, msg = run_pair(op, key, dtype, values)
        expected = outcome == "fail" and covering(xfails, "dtypes", dtype) is not None
        differential_results.dtype_pair(key, dtype, outcome, msg, expected)
        if outcome == "fail":
            failures.append(("dtypes", dtype, msg))

    unexpected = [f for f in failures if not covering(xfails, f[0], f[1])]
    if unexpected:
        lines = [f"{dtype_name(d)}: {msg}" for _, d, msg in unexpected[:6]]
        pytest.fail(
            f"{len(unexpected)} failing (op, dtype) pair(s):\n" + "\n".join(lines), pytrace=False
        )
    # Every dtype an entry names must still fail (an entry without dtypes: some dtype).
    failed = {d for _, d, _ in failures}
    xpass = [
        dtype_name(d) if d is not None else "every dtype"
        for x in xfails
        if "dtypes" in x.phases
        for d in (sorted(x.dtypes - failed, key=str) if x.dtypes else [None] * (not failed))
    ]
    if xpass:
        pytest.fail(
            f"XPASS: {key!r} passes in the dtypes phase for {', '.join(xpass)}: "
            "remove or narrow its known_failures.EXPECTED_FAILURES entry",
            pytrace=False,
        )
    if failures:
        pytest.xfail("; ".join(sorted({covering(xfails, *f[:2]).reason for f in failures})))
