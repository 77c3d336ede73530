"""What profiling costs on the host, per op, on `neuron`.

Three runs of the same small ops, side by side in one process:

* off:    no profiler (the figure benchmarks/op_overhead.py measures);
* cpu:    torch.profiler with ProfilerActivity.CPU only (PyTorch's own cost of
          recording each op);
* device: torch.profiler with CPU + PrivateUse1 (the device timeline on top).

"device - cpu" is what the device timeline adds per op on the host (correlation
ids, the item's note, the trace record); target <= 1 us. "off" against
op_overhead.py's figure shows that a process that does not profile pays nothing.
Times are host time per op (the ops are queued and the device drained once per
round), median of --rounds rounds. Run from the repo root::

    python benchmarks/profiler_overhead.py --iters 2000 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

try:
    import torch_neuronx  # noqa: F401
except ImportError:
    pass

TARGET_ADDED_US = 1.0


def cases(device):
    a = torch.randn(16, device=device)
    b = torch.randn(16, device=device)
    m1 = torch.randn(64, 64, device=device)
    m2 = torch.randn(64, 64, device=device)
    return {
        "add (16 f32)": lambda: a + b,
        "mul_ (16 f32)": lambda: a.mul_(1.0),
        "matmul (64x64 f32)": lambda: m1 @ m2,
        "sum (64x64 f32)": lambda: m1.sum(),
    }


def per_op_us(fn, iters: int, rounds: int, activities) -> float:
    samples = []
    for _ in range(rounds):
        torch.neuron.synchronize()
        if activities is None:
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            t1 = time.perf_counter()
            torch.neuron.synchronize()
        else:
            with profile(activities=activities):
                t0 = time.perf_counter()
                for _ in range(iters):
                    fn()
                t1 = time.perf_counter()
                torch.neuron.synchronize()
        samples.append((t1 - t0) / iters * 1e6)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    dev = torch.device("neuron")
    modes = {
        "off": None,
        "cpu": [ProfilerActivity.CPU],
        "device": [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
    }
    print(f"host time per op, us (median of {args.rounds} rounds of {args.iters} ops)")
    print(f"{'op':<22}{'off':>9}{'cpu':>9}{'device':>9}{'device-cpu':>12}")
    worst = 0.0
    for name, fn in cases(dev).items():
        for _ in range(200):  # warm caches (metadata, allocator)
            fn()
        r = {m: per_op_us(fn, args.iters, args.rounds, acts) for m, acts in modes.items()}
        added = r["device"] - r["cpu"]
        worst = max(worst, added)
        print(f"{name:<22}{r['off']:>9.2f}{r['cpu']:>9.2f}{r['device']:>9.2f}{added:>12.2f}")
    verdict = "OK" if worst <= TARGET_ADDED_US else "ABOVE TARGET"
    print(
        f"largest added cost of the device timeline: {worst:.2f} us/op "
        f"(target <= {TARGET_ADDED_US} us) {verdict}"
    )


if __name__ == "__main__":
    main()
