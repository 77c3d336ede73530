"""Random ops on neuron against the CPU, side by side in one run.

Neuron's random ops run the CPU's kernels on the host at the call (so they draw the
CPU's numbers), then queue a copy of the numbers into device memory; dropout adds its
arithmetic as device ops. This prints, per workload, the median time per call on each
device (device work included: each timed block ends with a synchronisation) and the
neuron/CPU ratio. Each device is measured in a fresh child process per round (as
gpt_step.py does: a process that has run OpenMP-parallel kernels from two threads
slows both down), rounds alternating. Run from the repo root::

    python benchmarks/random_ops.py --iters 50
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from child_result import run_child


def sync(device: str) -> None:
    if device == "neuron":
        torch.neuron.synchronize()


def workloads(device: str):
    big = torch.randn(1 << 20, device=device)
    small = torch.randn(64, device=device)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(256, 1024),
        torch.nn.GELU(),
        torch.nn.Dropout(0.1),
        torch.nn.Linear(1024, 256),
    ).to(device)
    x = torch.randn(64, 256, device=device)

    def mlp_step():
        mlp.zero_grad(set_to_none=True)
        mlp(x).square().mean().backward()

    return {
        "randn 1M": lambda: torch.randn(1 << 20, device=device),
        "rand 64": lambda: torch.rand(64, device=device),
        "dropout 1M": lambda: F.dropout(big, 0.1, training=True),
        "dropout 64": lambda: F.dropout(small, 0.1, training=True),
        "bernoulli_(p) 1M": lambda: torch.empty_like(big).bernoulli_(0.5),
        "MLP step with dropout": mlp_step,
    }


def time_one(fn, device: str, iters: int) -> float:
    fn()
    sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    sync(device)
    return (time.perf_counter() - start) / iters


def measure(device: str, iters: int) -> dict[str, float]:
    torch.manual_seed(0)
    return {name: time_one(fn, device, iters) for name, fn in workloads(device).items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--one", help=argparse.SUPPRESS)  # child mode: one device, JSON out
    args = p.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.iters)))
        return
    times: dict[str, list[dict[str, float]]] = {"cpu": [], "neuron": []}
    for _ in range(args.rounds):  # alternating: the host's speed drifts
        for d in ("cpu", "neuron"):
            cmd = ["--one", d, "--iters", str(args.iters)]
            times[d].append(run_child(__file__, cmd, timeout=600))
    print(f"{'workload':<24}{'cpu ms':>10}{'neuron ms':>12}{'neuron/cpu':>12}")
    for name in times["cpu"][0]:
        c = statistics.median(r[name] for r in times["cpu"])
        n = statistics.median(r[name] for r in times["neuron"])
        print(f"{name:<24}{c * 1e3:>10.3f}{n * 1e3:>12.3f}{n / c:>12.2f}")


if __name__ == "__main__":
    main()
