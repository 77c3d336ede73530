"""Training-step time of the small GPT: one device compared with another.

Each device trains the same model (same seed, so same initial weights and the same
batches) for a few warm-up steps and then --steps timed steps. A timed step is the
whole iteration: batch sampling and host-to-device copy, forward, backward and AdamW
update. Run from the repo root::

    python benchmarks/gpt_step.py --devices neuron,cpu --steps 10

Target: neuron/cpu ratio <= 1.0, i.e. the device is at least as fast as the CPU. The
losses after the timed steps are printed for both devices; they should agree to a
few decimal places, since both runs start from identical weights and data.

Each device is measured in a fresh child process of this one run: once a process has
run OpenMP-parallel CPU kernels from two threads (the main thread for the CPU run, a
stream worker for the neuron run), libgomp keeps two thread pools, throttles their
spin-waiting, and whichever device runs second is measurably slower.
`--same-process` measures both in this process instead.

The machine's speed drifts by ±10% between runs on a shared 2-core host, so the
devices are measured in `--rounds` alternating rounds (default 3) and the median of the
per-round ratios is the reported figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

try:
    # Normally loaded by `import torch` via its backend entry point; explicit import
    # covers environments where autoloading is disabled.
    import torch_neuronx  # noqa: F401
except ImportError:
    pass

# Run as `python benchmarks/gpt_step.py`: sys.path[0] is benchmarks/, so the repo root
# must be added for `examples.gpt.*` to resolve.
# A bare sys.path.insert is the one statement E402 permits before imports.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from child_result import run_child

from examples.gpt.data import get_batch, get_tokenizer
from examples.gpt.model import GPTConfig
from examples.gpt.train import (
    build_model,
    make_optimizer,
    parse_device,
    synchronize,
    train_step,
)

TARGET_RATIO = 1.0


def bench_device(
    device: torch.device, cfg: GPTConfig, args: argparse.Namespace
) -> tuple[float, float]:
    """Returns (ms per timed step, loss of the last timed step)."""
    model = build_model(cfg, device, args.seed)
    optimizer = make_optimizer(model, args.lr)
    model.train()
    # A fresh generator per device with the same seed gives both devices the same
    # sequence of batches.
    gen = torch.Generator().manual_seed(args.seed)

    # Warm-up steps absorb one-time costs (kernel compilation/caching, allocator
    # growth, AdamW state creation on the first step) that are not per-step cost.
    for _ in range(args.warmup):
        x, y = get_batch("train", args.batch, args.seq_len, device, gen)
        train_step(model, optimizer, x, y)

    # Drain the queue first so warm-up work is not billed to the timed steps, and
    # again before stopping the clock so queued work is included.
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        x, y = get_batch("train", args.batch, args.seq_len, device, gen)
        loss = train_step(model, optimizer, x, y)
    synchronize(device)
    elapsed = time.perf_counter() - t0
    return elapsed / args.steps * 1e3, loss.item()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10, help="timed steps per device")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before timing")
    p.add_argument(
        "--devices",
        default="neuron,cpu",
        help="two devices A,B; the ratio reported is A/B (default neuron,cpu)",
    )
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--same-process", action="store_true", help="measure both devices in this process"
    )
    p.add_argument("--rounds", type=int, default=3, help="alternating measurements of both devices")
    p.add_argument("--one", help=argparse.SUPPRESS)  # child mode: one device, JSON out
    args = p.parse_args(argv)
    if args.steps < 1 or args.rounds < 1:
        p.error("--steps and --rounds must be >= 1")

    def cfg_for() -> GPTConfig:
        return GPTConfig(vocab_size=get_tokenizer().vocab_size, seq_len=args.seq_len)

    if args.one:
        ms, loss = bench_device(parse_device(args.one), cfg_for(), args)
        print(json.dumps({"ms": ms, "loss": loss}))
        return

    names = [d.strip() for d in args.devices.split(",") if d.strip()]
    if len(names) != 2:
        p.error(f"--devices needs exactly two devices, got {names}")
    devices = [parse_device(n) for n in names]

    # The benchmark is defined on the default GPT size (6 layers, d_model 256).
    cfg = cfg_for()
    print(
        f"GPT n_layer={cfg.n_layer} n_head={cfg.n_head} d_model={cfg.d_model} "
        f"seq_len={cfg.seq_len} batch={args.batch} AdamW lr={args.lr} "
        f"seed={args.seed} warmup={args.warmup} steps={args.steps} "
        f"cpu threads={torch.get_num_threads()}",
        flush=True,
    )

    def measure(name: str, device: torch.device) -> tuple[float, float]:
        if args.same_process:
            return bench_device(device, cfg, args)
        child = ["--one", name, "--steps", str(args.steps)]
        child += ["--warmup", str(args.warmup), "--batch", str(args.batch)]
        child += ["--seq-len", str(args.seq_len), "--lr", str(args.lr)]
        child += ["--seed", str(args.seed)]
        r = run_child(__file__, child, timeout=None)
        return r["ms"], r["loss"]

    # Rounds alternate the devices (A, B, A, B, ...): drift in the machine's speed
    # then hits both alike, and the median ratio of the rounds is the figure.
    pair = f"{names[0]}/{names[1]}"
    ratios = []
    for rnd in range(args.rounds):
        results = []
        for name, device in zip(names, devices, strict=True):
            ms, loss = measure(name, device)
            print(
                f"  round {rnd + 1} {name:<10} {ms:10.1f} ms/step   "
                f"loss after timed steps {loss:.6f}",
                flush=True,
            )
            results.append((ms, loss))
        (ms_a, loss_a), (ms_b, loss_b) = results
        ratios.append(ms_a / ms_b)
        diff = abs(loss_a - loss_b)
        print(f"  round {rnd + 1} ratio {pair}: {ratios[-1]:.2f}   loss |diff| {diff:.2e}")
    ratio = statistics.median(ratios)
    verdict = "ok" if ratio <= TARGET_RATIO else "MISS"
    spread = f"rounds {min(ratios):.2f}..{max(ratios):.2f}"
    print(
        f"ratio {pair}: {ratio:.2f} median of {len(ratios)} ({spread})  "
        f"(target <= {TARGET_RATIO}) {verdict}"
    )


if __name__ == "__main__":
    main()
