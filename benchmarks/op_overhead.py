"""Per-op dispatch overhead of small eager ops: one device compared with another.

The ops are tiny, so the time per op is almost entirely framework and runtime
overhead (dispatch, allocation, launch), not compute. Run from the repo root::

    python benchmarks/op_overhead.py --devices neuron,cpu --iters 10000

Target: neuron/cpu ratio <= 2.0 for every op.

Each device is measured in a fresh child process of this one run, so that neither run
inherits the other's thread pools (OpenMP pools of threads other than the caller's make
libgomp throttle the caller's parallel kernels; the backend releases a stream worker's
pool only after 200 ms without work, see core/compute_pool.h). `--same-process`
measures both in this process instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

import torch
from child_result import run_child

try:
    # Normally loaded by `import torch` via its backend entry point; explicit import
    # covers environments where autoloading is disabled.
    import torch_neuronx  # noqa: F401
except ImportError:
    pass

TARGET_RATIO = 2.0


def synchronize(device: torch.device) -> None:
    # Ops on an asynchronous device return once queued; without waiting for them the
    # clock would measure only enqueueing, not execution.
    if device.type == "neuron":
        torch.neuron.synchronize()
    elif device.type != "cpu":
        torch.accelerator.synchronize(device)


def make_cases(device: torch.device) -> dict[str, Callable[[], torch.Tensor]]:
    """Name -> zero-argument closure running one op on tensors already on device."""
    # Inputs are created up front so that only the op itself is timed.
    a = torch.randn(16, device=device)
    b = torch.randn(16, device=device)
    m1 = torch.randn(64, 64, device=device)
    m2 = torch.randn(64, 64, device=device)
    x = torch.randn(16, device=device)
    y = torch.randn(4, 4, device=device)
    out = torch.empty(16, device=device)
    return {
        "add (16 f32)": lambda: a + b,
        "add out= (16 f32)": lambda: torch.add(a, b, out=out),
        "matmul (64x64 f32)": lambda: m1 @ m2,
        "view(4,4) + add": lambda: x.view(4, 4) + y,
    }


def time_op(fn: Callable[[], torch.Tensor], device: torch.device, iters: int) -> float:
    """Seconds for `iters` calls of fn, with the device drained at both ends."""
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    synchronize(device)
    return time.perf_counter() - t0


def bench_device(device: torch.device, iters: int, warmup: int, repeats: int) -> dict[str, float]:
    """Name -> best µs/op over `repeats` runs."""
    results = {}
    for name, fn in make_cases(device).items():
        # Warm-up absorbs one-time costs (kernel compilation/caching, allocator pool
        # growth, lazy initialisation) that are not per-op overhead.
        time_op(fn, device, warmup)
        # The minimum over repeats is the least noisy estimate of the steady-state
        # cost; noise from other processes only ever adds time.
        best = min(time_op(fn, device, iters) for _ in range(repeats))
        results[name] = best / iters * 1e6
    return results


def bench_in_child(name: str, args: argparse.Namespace) -> dict[str, float]:
    """bench_device in a fresh interpreter (see the module docstring)."""
    cmd = [
        "--child",
        name,
        f"--iters={args.iters}",
        f"--warmup={args.warmup}",
        f"--repeats={args.repeats}",
    ]
    return run_child(__file__, cmd, timeout=None)


def parse_device(name: str) -> torch.device:
    try:
        return torch.device(name)
    except RuntimeError as e:
        sys.exit(f"unknown device {name!r} ({e}); is torch_neuronx installed?")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=10_000, help="timed ops per run")
    p.add_argument(
        "--devices",
        default="neuron,cpu",
        help="two devices A,B; the ratio reported is A/B (default neuron,cpu)",
    )
    p.add_argument("--warmup", type=int, default=1000, help="untimed ops before timing")
    p.add_argument("--repeats", type=int, default=3, help="timed runs; the best is kept")
    p.add_argument(
        "--same-process", action="store_true", help="measure both devices in this process"
    )
    p.add_argument("--child", help=argparse.SUPPRESS)  # internal: measure one device
    args = p.parse_args(argv)
    if args.child:
        print(
            json.dumps(
                bench_device(parse_device(args.child), args.iters, args.warmup, args.repeats)
            )
        )
        return

    names = [d.strip() for d in args.devices.split(",") if d.strip()]
    if len(names) != 2:
        p.error(f"--devices needs exactly two devices, got {names}")
    devices = [parse_device(n) for n in names]

    print(
        f"iters={args.iters} warmup={args.warmup} repeats={args.repeats} "
        f"cpu threads={torch.get_num_threads()} torch={torch.__version__}"
    )
    if args.same_process:
        results = [bench_device(d, args.iters, args.warmup, args.repeats) for d in devices]
    else:
        results = [bench_in_child(n, args) for n in names]

    col_a, col_b = f"{names[0]} µs/op", f"{names[1]} µs/op"
    ratio_col = f"{names[0]}/{names[1]}"
    header = f"{'op':<20} {col_a:>14} {col_b:>14} {ratio_col:>12}  target <= {TARGET_RATIO}"
    print(header)
    print("-" * len(header))
    all_ok = True
    for name in results[0]:
        ua, ub = results[0][name], results[1][name]
        ratio = ua / ub
        ok = ratio <= TARGET_RATIO
        all_ok &= ok
        verdict = "ok" if ok else "MISS"
        print(f"{name:<20} {ua:>14.2f} {ub:>14.2f} {ratio:>12.2f}  {verdict}")
    print(f"overall: {'all within target' if all_ok else 'target missed'}")


if __name__ == "__main__":
    main()
