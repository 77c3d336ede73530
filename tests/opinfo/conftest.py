"""Collects the per-sample results of the differential OpInfo suite and prints the summary."""

from __future__ import annotations

import faulthandler
from dataclasses import dataclass, field

import pytest
import torch

# Per-sample timeouts (SIGALRM) cannot interrupt a kernel stuck inside C++; if
# one op's test runs this long, dump every thread's stack and exit rather than
# hang the suite.
WATCHDOG_S = 300

_RESULTS = pytest.StashKey["DifferentialResults"]()


# Sample phases of test_opinfo_differential ("zero_dim": the derived 0-d / unbatched
# samples); the "dtypes" and "errors" phases count (op, dtype) pairs and error inputs.
PHASES = ("forward", "backward", "out", "zero_dim")
ERROR_CLASSES = ("at-call-ok", "at-call-wrong-type", "at-call-wrong-message", "late", "never")


def _phase_counts() -> dict[str, int]:
    return dict.fromkeys(PHASES, 0)


@dataclass
class OpResult:
    key: str
    # Per phase ("forward" / "backward" / "out"): sample counts.
    passed: dict[str, int] = field(default_factory=_phase_counts)
    failed: dict[str, int] = field(default_factory=_phase_counts)
    skipped: dict[str, int] = field(default_factory=_phase_counts)
    # Of the failed ones: covered by known_failures.EXPECTED_FAILURES.
    expected: dict[str, int] = field(default_factory=_phase_counts)
    # Dense CPU results whose strides were compared, and the mismatches seen.
    strides_compared: int = 0
    stride_mismatches: list[str] = field(default_factory=list)
    # (phase, dtype, message) of every failing sample.
    failures: list[tuple[str, object, str]] = field(default_factory=list)

    @property
    def forward_passes(self) -> bool:
        return self.passed["forward"] > 0 and self.failed["forward"] == 0


@dataclass
class DifferentialResults:
    ops: dict[str, OpResult] = field(default_factory=dict)
    # Ops that cannot run on CPU (key -> why): nothing to compare against.
    not_applicable: dict[str, str] = field(default_factory=dict)

    # The "dtypes" phase: (key, dtype, "pass" | "fail" | "no_ref", message, expected).
    dtype_pairs: list[tuple[str, torch.dtype, str, str, bool]] = field(default_factory=list)
    # The "errors" phase: key -> ([(class, expected error, what neuron did)], skipped, how).
    error_ops: dict[str, tuple[list[tuple[str, str, str]], int, str]] = field(default_factory=dict)

    # test_moe_routing_dtypes: (op, dtype, failure message or None, expected).
    moe_cases: list[tuple[str, torch.dtype, str | None, bool]] = field(default_factory=list)

    def moe_case(self, name: str, dtype, message: str | None, expected: bool) -> None:
        self.moe_cases.append((name, dtype, message, expected))

    def op(self, key: str) -> OpResult:
        return self.ops.setdefault(key, OpResult(key))

    def dtype_pair(self, key, dtype, outcome: str, message: str, expected: bool) -> None:
        self.dtype_pairs.append((key, dtype, outcome, message, expected))

    def error_op(self, key: str, rows, skipped: int, how: str) -> None:
        self.error_ops[key] = (rows, skipped, how)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_RESULTS] = DifferentialResults()


@pytest.fixture(autouse=True)
def _watchdog():
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def differential_results(request: pytest.FixtureRequest) -> DifferentialResults:
    return request.config.stash[_RESULTS]


def _scope(x) -> str:
    scope = "+".join(x.phases)
    if x.dtypes is not None:
        scope += " " + ",".join(sorted(str(d).removeprefix("torch.") for d in x.dtypes))
    return scope


def _dtype(d) -> str:
    return str(d).removeprefix("torch.")


def _by_op(rows: list[tuple[str, object, str]]) -> list[tuple[str, str]]:
    """(key, dtype, message) rows -> one line per (key, message): "key dtypes", message."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for key, dtype, msg in rows:
        grouped.setdefault((key, msg), []).append(_dtype(dtype))
    return [(f"{k} [{','.join(ds)}]", m) for (k, m), ds in grouped.items()]


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    results = config.stash.get(_RESULTS, None)
    if results is None or not (
        results.ops or results.dtype_pairs or results.error_ops or results.moe_cases
    ):
        return
    from known_failures import (
        EXPECTED_FAILURES,
        RANDOM_OPS,
        SKIP,
        STRIDE_DIFFERENCES,
        TOLERANCES,
        VALUE_NOT_COMPARABLE,
    )

    write = terminalreporter.write_line

    def listing(title: str, rows: list[tuple[str, str]]) -> None:
        if rows:
            write(f"{title} ({len(rows)}):")
            for k, v in rows:
                write(f"  {k}: {v}")

    ops = list(results.ops.values())
    ran = (
        set(results.ops)
        | set(results.error_ops)
        | {p[0] for p in results.dtype_pairs}
        | {c[0] for c in results.moe_cases}
    )
    write("")
    if ops:
        for phase in PHASES:
            write(
                f"{phase}: {sum(r.passed[phase] for r in ops)} passed, "
                f"{sum(r.failed[phase] for r in ops)} failed "
                f"({sum(r.expected[phase] for r in ops)} of them expected), "
                f"{sum(r.skipped[phase] for r in ops)} skipped samples"
            )
        n_strides = sum(r.strides_compared for r in ops)
        stride_ops = [r for r in ops if r.stride_mismatches]
        n_mismatch = sum(len(r.stride_mismatches) for r in ops)
        write(
            f"strides: {n_strides} dense CPU results compared, {n_mismatch} mismatches "
            f"in {len(stride_ops)} ops"
        )
    if results.dtype_pairs:
        pairs = results.dtype_pairs
        n_pass = sum(p[2] == "pass" for p in pairs)
        n_fail = sum(p[2] == "fail" for p in pairs)
        n_none = sum(p[2] == "no_ref" for p in pairs)
        n_exp = sum(p[4] for p in pairs)
        rate = 100.0 * n_pass / max(1, n_pass + n_fail)
        write(
            f"dtypes: {len(pairs)} (op, CUDA-dtype) pairs: {n_pass} passed, {n_fail} failed "
            f"({n_exp} of them expected), {n_none} without a reference"
        )
        write(
            f"dtype parity: {n_pass}/{n_pass + n_fail} (op, CUDA-dtype) pairs pass ({rate:.1f}%)"
            f" [{n_pass}/{len(pairs)} ({100.0 * n_pass / len(pairs):.1f}%) counting the "
            f"{n_none} pairs without a reference]"
        )
    if results.moe_cases:
        cases = results.moe_cases
        n_ok = sum(c[2] is None for c in cases)
        write(
            f"MoE routing dtypes: {n_ok}/{len(cases)} (op, CUDA-dtype) cases exact "
            f"({sum(c[3] for c in cases)} expected failures)"
        )
    if results.error_ops:
        rows = [r for rs, _, _ in results.error_ops.values() for r in rs]
        counts = {c: sum(r[0] == c for r in rows) for c in ERROR_CLASSES}
        tested = {k: v for k, v in results.error_ops.items() if v[0]}
        all_ok = [k for k, v in tested.items() if all(r[0] == "at-call-ok" for r in v[0])]
        n_skipped = sum(v[1] for v in results.error_ops.values())
        write(
            f"error inputs: {len(tested)} ops with error inputs, {len(all_ok)} raise every "
            f"CUDA error at the call"
        )
        write(
            f"error input classes ({len(rows)} error inputs): "
            + ", ".join(f"{c} {n}" for c, n in counts.items())
            + f"; {n_skipped} skipped (the CPU does not raise them either)"
            + f"; {len(results.error_ops) - len(tested)} ops with none left"
        )

    listing("Not counted: cannot run on CPU", sorted(results.not_applicable.items()))
    # Random ops and samples are compared by value here (same_draws).
    listing(
        "Compared by shape/dtype/device only",
        [(k, v) for k, v in VALUE_NOT_COMPARABLE.items() if k in ran and k not in RANDOM_OPS],
    )
    listing("Looser tolerances", [(k, v.reason) for k, v in TOLERANCES.items() if k in ran])
    listing("Skipped ops", [(k, v) for k, v in SKIP.items() if k in ran])
    listing(
        "Strides differ from CPU (allowed)",
        [(k, v) for k, v in STRIDE_DIFFERENCES.items() if k in results.ops],
    )
    listing(
        "Stride mismatches",
        [
            (r.key, f"{r.stride_mismatches[0]} (+{len(r.stride_mismatches) - 1} more)")
            for r in ops
            if r.stride_mismatches
        ],
    )
    listing(
        "Failing 0-d / unbatched samples",
        [(r.key, msg) for r in ops for phase, _, msg in r.failures if phase == "zero_dim"],
    )
    if results.dtype_pairs:
        listing(
            "Failing (op, CUDA-dtype) pairs",
            _by_op([(k, d, m) for k, d, o, m, _ in results.dtype_pairs if o == "fail"]),
        )
        listing(
            "(op, CUDA-dtype) pairs without a reference",
            _by_op([(k, d, m) for k, d, o, m, _ in results.dtype_pairs if o == "no_ref"]),
        )
    listing(
        "Failing MoE routing cases",
        _by_op([(k, d, m) for k, d, m, _ in results.moe_cases if m is not None]),
    )
    if results.error_ops:
        bad = []
        for key, (rows, _, how) in sorted(results.error_ops.items()):
            wrong = [r for r in rows if r[0] != "at-call-ok"]
            if wrong:
                cls, expect, got = wrong[0]
                classes = ", ".join(
                    f"{c} {n}" for c in ERROR_CLASSES[1:] if (n := sum(r[0] == c for r in rows))
                )
                bad.append(
                    (
                        key,
                        f"{classes} of {len(rows)} ({how}); e.g. {cls}: expected {expect}, "
                        f"got {got}",
                    )
                )
        listing("Ops not raising every error input at the call", bad)
    entries = [
        (f"{k} [{_scope(x)}]", x.reason)
        for k, v in EXPECTED_FAILURES.items()
        if k in ran
        for x in (v if isinstance(v, tuple) else (v,))
    ]
    listing("Expected failures", entries)
    if ops:
        not_passing = [r.key for r in ops if not r.forward_passes]
        if not_passing:
            write(f"Ops not passing forward ({len(not_passing)}): {', '.join(not_passing)}")
        n_pass = sum(sum(r.passed.values()) for r in ops)
        n_fail = sum(sum(r.failed.values()) for r in ops)
        n_skip = sum(sum(r.skipped.values()) for r in ops)
        fwd_pass = sum(r.forward_passes for r in ops)
        rate = 100.0 * fwd_pass / len(ops)
        write(
            f"OpInfo differential: {n_pass} passed, {n_fail} failed, {n_skip} skipped samples; "
            f"ops forward pass rate {rate:.1f}% ({fwd_pass}/{len(ops)} ops)"
        )
