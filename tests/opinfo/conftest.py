"""Collects the per-sample results of the differential OpInfo suite and prints the summary."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

_RESULTS = pytest.StashKey["DifferentialResults"]()


@dataclass
class OpResult:
    key: str
    # Per phase ("forward" / "backward"): sample counts.
    passed: dict[str, int] = field(default_factory=lambda: {"forward": 0, "backward": 0})
    failed: dict[str, int] = field(default_factory=lambda: {"forward": 0, "backward": 0})
    skipped: dict[str, int] = field(default_factory=lambda: {"forward": 0, "backward": 0})
    # Why the whole op was skipped or is expected to fail (from known_failures).
    note: str = ""

    @property
    def forward_passes(self) -> bool:
        return self.passed["forward"] > 0 and self.failed["forward"] == 0


@dataclass
class DifferentialResults:
    ops: dict[str, OpResult] = field(default_factory=dict)
    # Ops that OpInfo gives no CPU dtype at all: nothing to compare against.
    not_applicable: list[str] = field(default_factory=list)

    def op(self, key: str) -> OpResult:
        return self.ops.setdefault(key, OpResult(key))


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_RESULTS] = DifferentialResults()


@pytest.fixture(scope="session")
def differential_results(request: pytest.FixtureRequest) -> DifferentialResults:
    return request.config.stash[_RESULTS]


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    results = config.stash.get(_RESULTS, None)
    if results is None or not results.ops:
        return
    from known_failures import EXPECTED_FAILURES, SKIP, VALUE_NOT_COMPARABLE

    ops = list(results.ops.values())
    n_pass = sum(sum(r.passed.values()) for r in ops)
    n_fail = sum(sum(r.failed.values()) for r in ops)
    n_skip = sum(sum(r.skipped.values()) for r in ops)
    fwd_pass = sum(r.forward_passes for r in ops)
    total = len(ops)
    write = terminalreporter.write_line
    write("")
    for phase in ("forward", "backward"):
        write(
            f"  {phase}: {sum(r.passed[phase] for r in ops)} passed, "
            f"{sum(r.failed[phase] for r in ops)} failed, "
            f"{sum(r.skipped[phase] for r in ops)} skipped samples"
        )
    shown = [(k, v) for k, v in VALUE_NOT_COMPARABLE.items() if k in results.ops]
    if shown:
        write(f"Ops compared by shape/dtype/device only ({len(shown)}):")
        for k, v in shown:
            write(f"  {k}: {v}")
    shown = [(k, v) for k, v in SKIP.items() if k in results.ops]
    if shown:
        write(f"Skipped ops ({len(shown)}):")
        for k, v in shown:
            write(f"  {k}: {v}")
    shown = [(k, v) for k, v in EXPECTED_FAILURES.items() if k in results.ops]
    if shown:
        write(f"Expected failures ({len(shown)}):")
        for k, v in shown:
            scope = v.phase
            if v.dtypes is not None:
                scope += " " + ",".join(sorted(str(d).removeprefix("torch.") for d in v.dtypes))
            write(f"  {k} [{scope}]: {v.reason}")
    not_passing = [r.key for r in ops if not r.forward_passes]
    if not_passing:
        write(f"Ops not passing forward ({len(not_passing)}): {', '.join(not_passing)}")
    if results.not_applicable:
        write(
            f"Not counted, no CPU dtype in OpInfo ({len(results.not_applicable)}): "
            + ", ".join(results.not_applicable)
        )
    rate = 100.0 * fwd_pass / total if total else 0.0
    write(
        f"OpInfo differential: {n_pass} passed, {n_fail} failed, {n_skip} skipped samples; "
        f"ops forward pass rate {rate:.1f}% ({fwd_pass}/{total} ops)"
    )
