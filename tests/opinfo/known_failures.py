"""Every skip and expected failure of the differential OpInfo suite, with its reason.

This is the one place that lists them. Keys are OpInfo keys: ``op.name``, or
``op.name + "." + op.variant_test_name`` for a variant (``"normal.number_mean"``).

- ``NOT_APPLICABLE``: ops that cannot run on CPU at all; not run, and not
  counted in the pass rate (nor are ops whose OpInfo lists no CPU dtype).
- ``VALUE_NOT_COMPARABLE``: the op runs on both devices, but only the shape,
  dtype and device of its results are compared (random or uninitialised
  values). Backward is not compared for these ops.
- ``RANDOM_SAMPLES``: ops with some random samples (dropout_p > 0): those
  samples are compared like ``VALUE_NOT_COMPARABLE`` ops, the rest by value.
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
    # Which comparisons are expected to fail: "forward", "backward", "out".
    phases: tuple[str, ...] = ("forward", "backward", "out")
    # None: every tested dtype.
    dtypes: frozenset[torch.dtype] | None = None

    def covers(self, phase: str, dtype: torch.dtype) -> bool:
        return phase in self.phases and (self.dtypes is None or dtype in self.dtypes)


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

VALUE_NOT_COMPARABLE: dict[str, str] = {
    # Random ops: the neuron generator draws differently from the CPU one.
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


RANDOM_SAMPLES: dict[str, RandomSamples] = {
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

# Root causes, one reason each (see the bug list in the suite's report).
SPARSE = (
    "backend bug: sparse layouts are not supported on neuron (no SparseCsrPrivateUse1 / "
    "SparsePrivateUse1 kernels; to_sparse's sparse CPU result is copied into a dense output)"
)
EXPECTED_FAILURES: dict[str, XFail] = {
    # Sparse layouts.
    "to_sparse": XFail(SPARSE),
    "sparse.sampled_addmm": XFail(SPARSE),
    "sparse.mm.reduce": XFail(SPARSE),
}
