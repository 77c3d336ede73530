"""The ops of Mixture-of-Experts routing, on neuron, in every dtype CUDA takes for them.

histc, bincount, index_add_, scatter_add_, topk, sort, argsort, cumsum and
``torch._grouped_mm`` / ``torch.nn.functional.grouped_mm``, each checked against an
exact reference: integer math in Python/int64, or the CPU in a wider dtype on data
whose results are exact in the narrow one (small integers). Results must match
exactly: values, dtype, shape (and strides for grouped_mm, whose output rows are
padded to 16 bytes as on CUDA).

The CUDA dtypes are those of PyTorch 2.13's CUDA kernels (OpInfo's dtypesIfCUDA,
which PyTorch's CUDA CI checks against the kernels):

- histc: ``AT_DISPATCH_ALL_TYPES`` (float32/64, uint8, int8..int64; CUDA rejects
  float16 and has no bfloat16 case), output in the input dtype;
- bincount: ``AT_DISPATCH_INTEGRAL_TYPES``; weights float32 -> float32, else float64;
- index_add: all types, complex, complex32, float16, bfloat16, bool;
- scatter_add: all types, complex, float16, bfloat16, bool;
- topk: all types, float16, bfloat16; sort/argsort: also bool;
- cumsum: all types, complex, float16, bfloat16 (integers accumulate into int64);
- _grouped_mm: float32, bfloat16, float16 (``_grouped_mm_validate_inputs``), the
  output in mat_a's dtype.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from opinfo_common import DEVICE, dtype_name, expected_failures

INTS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
FLOATS = (torch.float32, torch.float64)
HALF = (torch.float16, torch.bfloat16)
COMPLEX = (torch.complex64, torch.complex128)

CUDA_DTYPES = {
    "histc": (*FLOATS, *INTS),
    "bincount": INTS,
    "index_add_": (*FLOATS, *HALF, *INTS, *COMPLEX, torch.complex32, torch.bool),
    "scatter_add_": (*FLOATS, *HALF, *INTS, *COMPLEX, torch.bool),
    "topk": (*FLOATS, *HALF, *INTS),
    "sort": (*FLOATS, *HALF, *INTS, torch.bool),
    "argsort": (*FLOATS, *HALF, *INTS, torch.bool),
    "cumsum": (*FLOATS, *HALF, *INTS, *COMPLEX),
    "_grouped_mm": (torch.float32, torch.bfloat16, torch.float16),
    "nn.functional.grouped_mm": (torch.float32, torch.bfloat16, torch.float16),
}
CASES = [(name, d) for name, dtypes in CUDA_DTYPES.items() for d in dtypes]


def neuron(t: torch.Tensor) -> torch.Tensor:
    return t.to(DEVICE)


def small_ints(shape, dtype: torch.dtype, low: int = -4, high: int = 5, seed: int = 0):
    """Small integers in ``dtype`` (exact in every dtype; bool: 0/1, unsigned: >= 0)."""
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype == torch.uint8:
        low, high = 0, high - low
    if dtype.is_complex:
        re = torch.randint(low, high, shape, generator=gen)
        im = torch.randint(low, high, shape, generator=gen)
        wide = torch.complex(re.double(), im.double())
        return wide.to(dtype)
    return torch.randint(low, high, shape, generator=gen).to(dtype)


def distinct(n: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """``n`` distinct values exact in ``dtype``, shuffled (no ties: indices are exact)."""
    gen = torch.Generator().manual_seed(seed)
    values = torch.randperm(n, generator=gen)
    if dtype != torch.uint8:
        values = values - n // 2
    return values.to(dtype)


def wide(dtype: torch.dtype) -> torch.dtype:
    if dtype.is_complex:
        return torch.complex128
    if dtype.is_floating_point:
        return torch.float64
    return torch.int64


def assert_exact(actual: torch.Tensor, expected: torch.Tensor, what: str = "") -> None:
    assert actual.device.type == DEVICE, f"{what}: result on {actual.device}"
    actual = actual.cpu()
    assert actual.dtype == expected.dtype, (
        f"{what}: dtype {actual.dtype}, expected {expected.dtype}"
    )
    assert actual.shape == expected.shape, (
        f"{what}: shape {actual.shape}, expected {expected.shape}"
    )
    if expected.dtype == torch.complex32:
        actual, expected = actual.to(torch.complex64), expected.to(torch.complex64)
    assert torch.equal(actual, expected), f"{what}: got\n{actual}\nexpected\n{expected}"


# ---------------------------------------------------------------- the checks


def histc_reference(values: list, bins: int, lo, hi, dtype: torch.dtype) -> torch.Tensor:
    """CUDA's histc binning, in exact arithmetic (Python ints / exact rationals)."""
    if lo == hi and values:
        lo, hi = min(values), max(values)
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    counts = [0] * bins
    for v in values:
        if lo <= v <= hi:
            b = int((v - lo) * bins // (hi - lo))
            counts[min(b, bins - 1)] += 1
    return torch.tensor(counts).to(dtype)


def check_histc(dtype: torch.dtype) -> None:
    if dtype.is_floating_point:
        # Bin midpoints: (x - min) * bins / (max - min) is exactly representable.
        x = (torch.randint(-6, 6, (40,), generator=torch.Generator().manual_seed(0)) + 0.5).to(
            dtype
        )
        for bins, lo, hi in ((12, -6, 6), (4, -6, 6), (3, 0, 6)):
            values = [float(v) for v in x.tolist()]
            got = torch.histc(neuron(x), bins=bins, min=lo, max=hi)
            assert_exact(got, histc_reference(values, bins, lo, hi, dtype), f"bins={bins}")
        return
    low, high = (0, 251) if dtype == torch.uint8 else (-100, 101)
    x = torch.randint(low, high, (64,), generator=torch.Generator().manual_seed(0)).to(dtype)
    values = x.tolist()
    # Explicit ranges (elements outside are ignored, the maximum goes to the last bin),
    # and min == max: the range of the data.
    ranges = [(7, low, high - 1), (256, 0, 0), (5, 10, 50), (3, 0, 0)]
    for bins, lo, hi in ranges:
        got = torch.histc(neuron(x), bins=bins, min=lo, max=hi)
        assert_exact(got, histc_reference(values, bins, lo, hi, dtype), f"bins={bins} [{lo}, {hi}]")
    # All elements equal, range from the data: [v - 1, v + 1].
    same = torch.full((9,), 3, dtype=dtype)
    got = torch.histc(neuron(same), bins=4, min=0, max=0)
    assert_exact(got, histc_reference([3] * 9, 4, 0, 0, dtype), "constant input")


def check_bincount(dtype: torch.dtype) -> None:
    x = torch.randint(0, 12, (50,), generator=torch.Generator().manual_seed(0)).to(dtype)
    values = x.tolist()
    counts = [values.count(i) for i in range(max(values) + 1)]
    assert_exact(torch.bincount(neuron(x)), torch.tensor(counts), "no weights")
    assert_exact(
        torch.bincount(neuron(x), minlength=20),
        torch.tensor(counts + [0] * (20 - len(counts))),
        "minlength",
    )
    w = small_ints((50,), torch.int64, seed=1)
    for w_dtype, out_dtype in (
        (torch.float32, torch.float32),
        (torch.float64, torch.float64),
        (torch.float16, torch.float64),
    ):
        sums = [0] * (max(values) + 1)
        for v, wt in zip(values, w.tolist(), strict=True):
            sums[v] += wt
        got = torch.bincount(neuron(x), weights=neuron(w.to(w_dtype)))
        assert_exact(got, torch.tensor(sums).to(out_dtype), f"weights {dtype_name(w_dtype)}")
    assert_exact(
        torch.bincount(neuron(torch.empty(0, dtype=dtype)), minlength=3),
        torch.zeros(3, dtype=torch.int64),
        "empty",
    )


def accumulate_reference(base: torch.Tensor, add, dtype: torch.dtype) -> torch.Tensor:
    """``add(base_wide)`` computed in the wide dtype, then back to ``dtype``."""
    if dtype == torch.bool:
        return add(base.to(torch.int64)) != 0
    return add(base.to(wide(dtype))).to(dtype)


def check_index_add(dtype: torch.dtype) -> None:
    base = small_ints((6, 5), dtype)
    src = small_ints((9, 5), dtype, seed=1)
    index = torch.tensor([0, 2, 2, 5, 0, 1, 2, 4, 0])  # duplicates accumulate
    for dim, idx, s in ((0, index, src), (1, torch.tensor([4, 0, 4]), src[:6, :3])):
        got = neuron(base).index_add_(dim, neuron(idx), neuron(s))
        want = accumulate_reference(
            base, lambda b, dim=dim, idx=idx, s=s: b.index_add_(dim, idx, s.to(b.dtype)), dtype
        )
        assert_exact(got, want, f"dim={dim}")
    if dtype != torch.bool:
        got = torch.index_add(neuron(base), 0, neuron(index), neuron(src), alpha=2)
        want = accumulate_reference(
            base, lambda b: b.index_add_(0, index, src.to(b.dtype), alpha=2), dtype
        )
        assert_exact(got, want, "alpha=2")


def check_scatter_add(dtype: torch.dtype) -> None:
    base = small_ints((4, 6), dtype)
    src = small_ints((4, 6), dtype, seed=1)
    gen = torch.Generator().manual_seed(2)
    for dim in (0, 1):
        index = torch.randint(0, base.shape[dim], (3, 5), generator=gen)
        got = neuron(base).scatter_add_(dim, neuron(index), neuron(src))
        want = accumulate_reference(
            base, lambda b, dim=dim, index=index: b.scatter_add_(dim, index, src.to(b.dtype)), dtype
        )
        assert_exact(got, want, f"dim={dim}")


def check_topk(dtype: torch.dtype) -> None:
    n = 40
    x = torch.stack([distinct(n, dtype, seed=s) for s in range(3)])
    for k, largest in itertools.product((1, 5, n), (True, False)):
        values, indices = torch.topk(neuron(x), k, dim=1, largest=largest, sorted=True)
        rows = [sorted(range(n), key=lambda i, r=r: r[i], reverse=largest)[:k] for r in x.tolist()]
        want_idx = torch.tensor(rows)
        assert_exact(indices, want_idx, f"indices k={k} largest={largest}")
        assert_exact(values, torch.gather(x, 1, want_idx), f"values k={k} largest={largest}")


def sort_reference(x: torch.Tensor, descending: bool) -> torch.Tensor:
    """Stable argsort of each row (Python's sort is stable, in either direction)."""
    return torch.tensor(
        [sorted(range(len(r)), key=lambda i, r=r: r[i], reverse=descending) for r in x.tolist()]
    )


def check_sort(dtype: torch.dtype, argsort: bool) -> None:
    n = 33
    if dtype == torch.bool:
        x = small_ints((3, n), dtype)
    else:
        # Ties in every row: only a stable sort has exact indices.
        x = torch.stack([distinct(n, dtype, seed=s) for s in range(3)])
        x[:, ::4] = x[:, 1:2]
    for descending in (False, True):
        want = sort_reference(x, descending)
        if argsort:
            got = torch.argsort(neuron(x), dim=1, descending=descending, stable=True)
            assert_exact(got, want, f"descending={descending}")
            continue
        values, indices = torch.sort(neuron(x), dim=1, descending=descending, stable=True)
        assert_exact(indices, want, f"indices descending={descending}")
        assert_exact(values, torch.gather(x, 1, want), f"values descending={descending}")
    if dtype != torch.bool:  # distinct values: any sort gives exact indices
        y = torch.stack([distinct(n, dtype, seed=s) for s in range(3)])
        got = torch.argsort(neuron(y), dim=1) if argsort else torch.sort(neuron(y), dim=1)[1]
        assert_exact(got, sort_reference(y, False), "unstable, distinct values")


def check_cumsum(dtype: torch.dtype) -> None:
    x = small_ints((5, 7), dtype, low=-3, high=4)
    out_dtype = torch.int64 if not (dtype.is_floating_point or dtype.is_complex) else dtype
    for dim in (0, 1):
        want = torch.cumsum(x.to(wide(dtype)), dim).to(out_dtype)
        assert_exact(torch.cumsum(neuron(x), dim), want, f"dim={dim}")
    # In the input dtype: integers wrap around as on CUDA.
    want = torch.cumsum(x.to(wide(dtype)), 1).to(dtype)
    assert_exact(torch.cumsum(neuron(x), 1, dtype=dtype), want, "dtype=input dtype")


def check_grouped_mm(dtype: torch.dtype, fn) -> None:
    """The four layouts of grouped_mm, against per-group float64 matmuls.

    mat_b is column-major, as MoE weights (``w.transpose(-2, -1)``) are; N = 12 is not a
    multiple of 16 bytes for the half types, so the output rows are padded (as on CUDA).
    """
    g, m, k, n = 3, 24, 16, 12
    offs = torch.tensor([5, 5, 24], dtype=torch.int32)  # an empty group too
    bounds = list(zip([0, *offs.tolist()[:-1]], offs.tolist(), strict=True))

    def mm(a, b):
        return (a.double() @ b.double()).to(dtype)

    a2 = small_ints((m, k), dtype, -2, 3)
    b3 = small_ints((g, n, k), dtype, -2, 3, seed=1).transpose(-2, -1)
    want = torch.cat([mm(a2[s:e], b3[i]) for i, (s, e) in enumerate(bounds)])
    got = fn(neuron(a2), move(b3), offs=neuron(offs))
    assert_exact(got, want, "2d x 3d")
    assert_strides(got, fn(a2, b3, offs=offs), "2d x 3d")

    a3 = small_ints((g, 8, k), dtype, -2, 3, seed=2)
    got = fn(neuron(a3), move(b3))
    assert_exact(got, torch.stack([mm(a3[i], b3[i]) for i in range(g)]), "3d x 3d")
    assert_strides(got, fn(a3, b3), "3d x 3d")

    # 2d x 2d: the contraction dimension is split into groups (weight gradients).
    a_t = small_ints((m, 8), dtype, -2, 3, seed=3).t()  # (8, m), column-major
    b_2 = small_ints((m, 16), dtype, -2, 3, seed=4)  # (m, 16)
    want = torch.stack([mm(a_t[:, s:e], b_2[s:e]) for s, e in bounds])
    got = fn(move(a_t), neuron(b_2), offs=neuron(offs))
    assert_exact(got, want, "2d x 2d")

    # 3d x 2d: mat_b's columns are split into groups.
    b_c = small_ints((m, k), dtype, -2, 3, seed=5).t()  # (k, m), column-major
    want = torch.cat([mm(a3[i], b_c[:, s:e]) for i, (s, e) in enumerate(bounds)], dim=1)
    got = fn(neuron(a3), move(b_c), offs=neuron(offs))
    assert_exact(got, want, "3d x 2d")


def move(t: torch.Tensor) -> torch.Tensor:
    """A neuron copy with the same strides (for the column-major operands)."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=DEVICE).copy_(t)


def assert_strides(actual: torch.Tensor, cpu: torch.Tensor, what: str) -> None:
    assert actual.stride() == cpu.stride(), f"{what}: strides {actual.stride()}, CPU {cpu.stride()}"


CHECKS = {
    "histc": check_histc,
    "bincount": check_bincount,
    "index_add_": check_index_add,
    "scatter_add_": check_scatter_add,
    "topk": check_topk,
    "sort": lambda d: check_sort(d, argsort=False),
    "argsort": lambda d: check_sort(d, argsort=True),
    "cumsum": check_cumsum,
    "_grouped_mm": lambda d: check_grouped_mm(d, torch._grouped_mm),
    "nn.functional.grouped_mm": lambda d: check_grouped_mm(d, torch.nn.functional.grouped_mm),
}


@pytest.mark.parametrize(("name", "dtype"), CASES, ids=[f"{n}-{dtype_name(d)}" for n, d in CASES])
def test_moe_routing_dtype(name, dtype, differential_results):
    if name in ("_grouped_mm", "nn.functional.grouped_mm"):
        fn = torch._grouped_mm if name == "_grouped_mm" else torch.nn.functional.grouped_mm
        if fn is None:
            pytest.skip(f"torch {torch.__version__} has no {name}")
    xfail = next((x for x in expected_failures(name) if x.covers("moe", dtype)), None)
    try:
        CHECKS[name](dtype)
        torch.neuron.synchronize()
    except Exception as e:
        try:
            torch.neuron.synchronize()
        except Exception:
            pass  # leave the device clean for the next case
        message = f"{type(e).__name__}: {str(e).strip()[:400]}"
        differential_results.moe_case(name, dtype, message, xfail is not None)
        if xfail is None:
            raise
        pytest.xfail(xfail.reason)
    differential_results.moe_case(name, dtype, None, False)
    if xfail is not None:
        pytest.fail(
            f"XPASS: {name} {dtype_name(dtype)} passes: remove it from the 'moe' entry in "
            "known_failures.EXPECTED_FAILURES",
            pytrace=False,
        )
