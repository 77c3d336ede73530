"""Every skip and expected failure of the differential OpInfo suite, with its reason.

This is the one place that lists them. Keys are OpInfo keys: ``op.name``, or
``op.name + "." + op.variant_test_name`` for a variant (``"normal.number_mean"``).

- ``VALUE_NOT_COMPARABLE``: the op runs on both devices, but only the shape,
  dtype and device of its results are compared (random or uninitialised
  values). Backward is not compared for these ops either.
- ``SKIP``: the op is not run at all.
- ``EXPECTED_FAILURES``: the op runs and is compared; failures in the scope of
  the entry (phase and dtypes) are expected. An entry whose scope then passes
  fails the test (XPASS), so the list stays honest.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

RANDOM = "value not comparable (random)"
UNINITIALIZED = "value not comparable (uninitialized memory)"


@dataclass(frozen=True)
class XFail:
    reason: str
    # "forward" or "backward".
    phase: str = "forward"
    # None: every tested dtype.
    dtypes: frozenset[torch.dtype] | None = None

    def covers(self, phase: str, dtype: torch.dtype) -> bool:
        return phase == self.phase and (self.dtypes is None or dtype in self.dtypes)


VALUE_NOT_COMPARABLE: dict[str, str] = {
    # Random ops: the neuron generator draws differently from the CPU one.
    "bernoulli": RANDOM,
    "cauchy": RANDOM,
    "exponential": RANDOM,
    "geometric": RANDOM,
    "log_normal": RANDOM,
    "multinomial": RANDOM,
    "normal": RANDOM,
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
    "nn.functional.scaled_dot_product_attention": RANDOM,
    # Uninitialised outputs.
    "empty": UNINITIALIZED,
    "empty_like": UNINITIALIZED,
    "empty_permuted": UNINITIALIZED,
    "empty_strided": UNINITIALIZED,
    "new_empty": UNINITIALIZED,
    "new_empty_strided": UNINITIALIZED,
}

SKIP: dict[str, str] = {}

EXPECTED_FAILURES: dict[str, XFail] = {}
