"""Collects the per-sample results of the differential OpInfo suite and prints the summary."""

from __future__ import annotations

import faulthandler
from dataclasses import dataclass, field

import pytest

# Per-sample timeouts (SIGALRM) cannot interrupt a kernel stuck inside C++; if
# one op's test runs this long, dump every thread's stack and exit rather than
# hang the suite.
WATCHDOG_S = 300

_RESULTS = pytest.StashKey["DifferentialResults"]()


PHASES = ("forward", "backward", "out")


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

    @property
    def forward_passes(self) -> bool:
        return self.passed["forward"] > 0 and self.failed["forward"] == 0


@dataclass
class DifferentialResults:
    ops: dict[str, OpResult] = field(default_factory=dict)
    # Ops that cannot run on CPU (key -> why): nothing to compare against.
    not_applicable: dict[str, str] = field(default_factory=dict)

    def op(self, key: str) -> OpResult:
        return self.ops.setdefault(key, OpResult(key))


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


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    results = config.stash.get(_RESULTS, None)
    if results is None or not results.ops:
        return
    from known_failures import (
        EXPECTED_FAILURES,
        RANDOM_SAMPLES,
        SKIP,
        TOLERANCES,
        VALUE_NOT_COMPARABLE,
    )

    ops = list(results.ops.values())
    write = terminalreporter.write_line
    write("")
    for phase in PHASES:
        write(
            f"{phase}: {sum(r.passed[phase] for r in ops)} passed, "
            f"{sum(r.failed[phase] for r in ops)} failed "
            f"({sum(r.expected[phase] for r in ops)} of them expected), "
            f"{sum(r.skipped[phase] for r in ops)} skipped samples"
        )

    def listing(title: str, rows: list[tuple[str, str]]) -> None:
        if rows:
            write(f"{title} ({len(rows)}):")
            for k, v in rows:
                write(f"  {k}: {v}")

    ran = results.ops
    listing("Not counted: cannot run on CPU", sorted(results.not_applicable.items()))
    listing(
        "Compared by shape/dtype/device only",
        [(k, v) for k, v in VALUE_NOT_COMPARABLE.items() if k in ran],
    )
    listing(
        "Some samples compared by shape/dtype/device only",
        [(k, v.reason) for k, v in RANDOM_SAMPLES.items() if k in ran],
    )
    listing("Looser tolerances", [(k, v.reason) for k, v in TOLERANCES.items() if k in ran])
    listing("Skipped ops", [(k, v) for k, v in SKIP.items() if k in ran])
    listing(
        "Expected failures",
        [(f"{k} [{_scope(v)}]", v.reason) for k, v in EXPECTED_FAILURES.items() if k in ran],
    )
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
