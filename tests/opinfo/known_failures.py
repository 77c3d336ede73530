"""Every skip and expected failure of the differential OpInfo suite, with its reason.

This is the one place that lists them. Keys are OpInfo keys: ``op.name``, or
``op.name + "." + op.variant_test_name`` for a variant (``"normal.number_mean"``).

- ``NOT_APPLICABLE``: ops that cannot run on CPU at all; not run, and not
  counted in the pass rate (nor are ops whose OpInfo lists no CPU dtype).
- ``VALUE_NOT_COMPARABLE``: the op runs on both devices, but only the shape,
  dtype and device of its results are compared (random or uninitialised
  values). Backward is not compared for these ops.
- ``RANDOM_OPS``: the random ones among them. Neuron draws the CPU's numbers
  after the same seed, so the differential suite seeds both runs of a sample
  alike and compares them by value, backward included; the compile and dtype
  suites compare only their shapes.
- ``RANDOM_SAMPLES``: ops with some random samples (dropout_p > 0): in the
  compile and dtype suites those samples are compared like
  ``VALUE_NOT_COMPARABLE`` ops, the rest by value; the differential suite
  compares all by value.
- ``TOLERANCES``: looser per-dtype tolerances, where neuron legitimately
  computes differently from the CPU kernel.
- ``SKIP``: the op is not run at all (and does not pass).
- ``EXPECTED_FAILURES``: the op runs and is compared; failing samples in the
  entry's scope (phases, dtypes) are expected. An entry whose scope then
  passes fails the test (XPASS), so the list stays honest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

RANDOM = "value not comparable (random)"
UNINITIALIZED = "value not comparable (uninitialized memory)"

HALF = frozenset({torch.float16, torch.bfloat16})


@dataclass(frozen=True)
class XFail:
    reason: str
    # Which comparisons are expected to fail: "forward", "backward", "out",
    # "zero_dim" (derived 0-d / unbatched samples), "strides", "dtypes" (CUDA dtype
    # parity), "errors" (error inputs).
    phases: tuple[str, ...] = ("forward", "backward", "out")
    # None: every tested dtype.
    dtypes: frozenset[torch.dtype] | None = None

    def covers(self, phase: str, dtype: torch.dtype | None) -> bool:
        return phase in self.phases and (
            self.dtypes is None or dtype is None or dtype in self.dtypes
        )


@dataclass(frozen=True)
class Tolerance:
    reason: str
    # dtype -> {"atol": ..., "rtol": ...}
    by_dtype: dict[torch.dtype, dict[str, float]] = field(default_factory=dict)


NOT_APPLICABLE: dict[str, str] = {
    "jiterator_unary": "CUDA-only (torch.cuda.jiterator): raises on CPU",
    "jiterator_binary": "CUDA-only (torch.cuda.jiterator): raises on CPU",
    "jiterator_4inputs_with_extra_args": "CUDA-only (torch.cuda.jiterator): raises on CPU",
    "jiterator_binary_return_by_ref": "CUDA-only (torch.cuda.jiterator): raises on CPU",
    "jiterator_2inputs_2outputs": "CUDA-only (torch.cuda.jiterator): raises on CPU",
}

RANDOM_OPS: dict[str, str] = {
    "bernoulli": RANDOM,
    "cauchy": RANDOM,
    "exponential": RANDOM,
    "geometric": RANDOM,
    "log_normal": RANDOM,
    "multinomial": RANDOM,
    "normal": RANDOM,
    "normal.in_place": RANDOM,
    "normal.number_mean": RANDOM,
    "uniform": RANDOM,
    "rand_like": RANDOM,
    "randn_like": RANDOM,
    "randint_like": RANDOM,
    "randn": RANDOM,
    "randint": RANDOM,
    "nn.functional.dropout": RANDOM,
    "nn.functional.dropout2d": RANDOM,
    "nn.functional.dropout3d": RANDOM,
    "nn.functional.alpha_dropout": RANDOM,
    "nn.functional.feature_alpha_dropout.with_train": RANDOM,
    "nn.functional.feature_alpha_dropout.without_train": RANDOM,
    "nn.functional.fractional_max_pool2d": RANDOM,
    "nn.functional.fractional_max_pool3d": RANDOM,
    "nn.functional.rrelu": RANDOM,
}

VALUE_NOT_COMPARABLE: dict[str, str] = {
    **RANDOM_OPS,
    # Uninitialised outputs.
    "empty": UNINITIALIZED,
    "empty_like": UNINITIALIZED,
    "empty_permuted": UNINITIALIZED,
    "empty_strided": UNINITIALIZED,
    "new_empty": UNINITIALIZED,
    "new_empty_strided": UNINITIALIZED,
}


@dataclass(frozen=True)
class RandomSamples:
    reason: str
    # Takes the SampleInput; True if its result is random.
    is_random: Callable[[object], bool]


LOWRANK = (
    RANDOM + ": singular vectors are unique only up to a sign (complex: a phase), which "
    "follows the random projection; the singular values match, and |U^H U_cpu| is the "
    "identity"
)

RANDOM_SAMPLES: dict[str, RandomSamples] = {
    "svd_lowrank": RandomSamples(LOWRANK, lambda s: True),
    "pca_lowrank": RandomSamples(LOWRANK, lambda s: True),
    "nn.functional.scaled_dot_product_attention": RandomSamples(
        RANDOM + " when dropout_p > 0",
        lambda s: s.kwargs.get("dropout_p", 0.0) > 0,
    ),
    "nn.functional.multi_head_attention_forward": RandomSamples(
        RANDOM + " when dropout_p > 0 and training",
        lambda s: s.args[9] > 0 and s.kwargs.get("training", True),
    ),
}

TOLERANCES: dict[str, Tolerance] = {
    "addr": Tolerance(
        "neuron runs ATen's CompositeExplicitAutograd math_addr (separate mul/add, each "
        "rounded to half; it wins over the PrivateUse1 fallback) where CPU has a fused "
        "kernel: differences of an ulp or two",
        {
            torch.float16: {"atol": 2e-2, "rtol": 1e-2},
            torch.bfloat16: {"atol": 1e-1, "rtol": 5e-2},
        },
    ),
}

SKIP: dict[str, str] = {}

# Ops whose results legitimately have other strides than the CPU's (reason): their
# stride mismatches are reported, not failed. An op listed here whose strides all
# match fails the test, so the list stays honest.
FFT_LAYOUT = (
    "FFT result layouts are backend-specific: neuron's come from the Meta kernels, "
    "which model cuFFT's (the strides CUDA returns, as a fake CUDA tensor shows); the "
    "CPU's pocketfft permutes dimensions differently. Shapes and values match"
)
STRIDE_DIFFERENCES: dict[str, str] = {
    **{op: FFT_LAYOUT for op in ("fft.rfft2", "fft.rfftn", "fft.hfft2", "fft.hfftn")},
    "fft.ifft": FFT_LAYOUT + " (out= resized from empty)",
    "fft.ihfft": FFT_LAYOUT + " (out= resized from empty)",
    "nn.functional.max_unpool2d.grad": (
        "contiguous result for a channels_last-strided input, as on CUDA (its "
        "max_unpool2d kernel makes input and output contiguous); the CPU kernel keeps "
        "the input's memory format"
    ),
}

# Root causes, one reason each (see the bug list in the suite's report).
SPARSE = (
    "backend bug: sparse layouts are not supported on neuron (no SparseCsrPrivateUse1 / "
    "SparsePrivateUse1 kernels; to_sparse raises NotImplementedError naming the layout)"
)
SAMPLE_AND_DTYPE_PHASES = ("forward", "backward", "out", "dtypes")

# CUDA dtype parity ("dtypes" phase): dtypes CUDA takes that fail on neuron.
FFT_HALF = (
    "backend bug: fft of float16 (and, from torch 2.14, bfloat16) input raises "
    "'Unsupported dtype' at the call: ATen's composite torch.fft functions accept the "
    "half types only on CUDA and meta tensors (promote_type_fft), before any neuron "
    "kernel runs; CUDA's cuFFT takes float16 and returns complex32/float16, and from "
    "2.14 computes bfloat16 in float32; complex32 input works"
)
FFT_OPS = [
    f"fft.{kind}{suffix}"
    for kind in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft")
    for suffix in ("", "2", "n")
]


def _fft_half_types_on_cuda() -> dict[str, frozenset[torch.dtype]]:
    """The half types each fft op's OpInfo lists for CUDA in the installed torch
    (float16; bfloat16 too from torch 2.14): exactly the pairs that fail."""
    from torch.testing._internal.opinfo.definitions.fft import op_db

    half = {torch.float16, torch.bfloat16}
    return {op.name: frozenset(half & set(op.dtypesIfCUDA)) for op in op_db if op.name in FFT_OPS}


# Strides ("strides" phase).
COLUMN_MAJOR = (
    "backend bug: row-major result where CPU and CUDA (the same BatchLinearAlgebra "
    "code: LAPACK / cuSOLVER / MAGMA layout) return it column-major; values match"
)


def strides(reason: str) -> XFail:
    return XFail(reason, phases=("strides",))


# Error inputs ("errors" phase): every error CUDA raises at the call is raised
# at the call on neuron (eager/first_call_validation.h, eager/call_checks.h), so
# none is expected to fail.


EXPECTED_FAILURES: dict[str, XFail | tuple[XFail, ...]] = {
    # Sparse layouts.
    "to_sparse": XFail(SPARSE, phases=SAMPLE_AND_DTYPE_PHASES),
    "sparse.sampled_addmm": XFail(SPARSE, phases=SAMPLE_AND_DTYPE_PHASES),
    "sparse.mm.reduce": XFail(SPARSE, phases=SAMPLE_AND_DTYPE_PHASES),
    # Strides.
    "ormqr": strides(COLUMN_MAJOR + " (out= resized from empty)"),
    "linalg.householder_product": strides(COLUMN_MAJOR + " (out= resized from empty)"),
    # CUDA dtype parity.
    **{
        op: XFail(FFT_HALF, phases=("dtypes",), dtypes=dtypes)
        for op, dtypes in _fft_half_types_on_cuda().items()
    },
}


# ================================================================ compile
# The torch.compile phase (test_opinfo_compile.py): each op compiled with
# backend="neuron" on neuron tensors against the op run eagerly on CPU. Its own
# lists: an op's compiled graph fails differently from its eager kernels. Phases:
# "forward" (the compiled outputs), "backward" (the input gradients through the
# compiled backward graph). An entry whose phase then passes fails the test (XPASS).

COMPILE_SPARSE = SPARSE + " (the compiled graph calls the same kernels)"
COMPILE_EXPECTED_FAILURES: dict[str, XFail | tuple[XFail, ...]] = {
    **{
        op: XFail(COMPILE_SPARSE, phases=("forward", "backward"))
        for op in ("to_sparse", "sparse.sampled_addmm", "sparse.mm.reduce")
    },
}

# Looser tolerances for the compiled graph (key -> dtype -> atol/rtol): Inductor's
# C++ kernels compute some functions differently from ATen's eager kernels (the
# CPU compile differs from eager CPU the same way).
COMPILE_TOLERANCES: dict[str, Tolerance] = {
    "erfinv": Tolerance(
        "Inductor's erfinv backward (sqrt(pi)/2 * exp(erfinv(x)^2)) rounds differently "
        "from ATen's: near |x| = 1, where the gradient is ~500, it differs by ~1.5e-6 "
        "relative (the CPU compile too)",
        {torch.float32: {"atol": 1e-5, "rtol": 1e-5}},
    ),
}

# Ops not run at all under compile (key -> reason).
COMPILE_SKIP: dict[str, str] = {}
