"""bfloat16 autocast against float32: the small GPT's loss curve and step time.

Trains the example GPT twice on one device from the same seed (same initial weights,
same batches): once in float32, once with the forward pass under
``torch.autocast(device, dtype=torch.bfloat16)``. Prints both loss curves side by side
every --print-every steps, the largest gap between the two smoothed curves, and the
time per step of each run with the ratio bf16/fp32. Run from the repo root::

    python benchmarks/autocast_gpt.py --steps 60

A bf16 run that tracks float32 stays within a few hundredths of its smoothed loss;
a policy that ran softmax, layer norm or the loss in bfloat16 drifts visibly.

The two runs are interleaved step by step in one process (which of them goes first
alternates), so that load from other processes on a shared machine falls on both
alike. Their models, optimizers and batch generators are separate, so each loss
curve is exactly what a run on its own gives. A step's time is the interval between
device events recorded around it (wall clock on the CPU); nothing waits inside the
loop, and the median over the timed steps is reported.
"""

from __future__ import annotations

import argparse
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

# Run as `python benchmarks/autocast_gpt.py`: sys.path[0] is benchmarks/, so the repo
# root must be added for `examples.gpt.*` to resolve.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples.gpt.data import get_batch, get_tokenizer
from examples.gpt.model import GPTConfig
from examples.gpt.train import (
    AMP_DTYPES,
    build_model,
    make_optimizer,
    parse_device,
    synchronize,
    train_step,
)

MODES = ("none", "bf16")


def step_clock(device: torch.device):
    """Returns mark() -> a handle per call, and elapsed(a, b) -> ms between two."""
    if device.type == "cpu":
        return time.perf_counter, lambda a, b: (b - a) * 1e3

    def mark():
        ev = torch.Event(device=device, enable_timing=True)
        ev.record()
        return ev

    return mark, lambda a, b: a.elapsed_time(b)


def new_run(args: argparse.Namespace, device: torch.device, cfg: GPTConfig) -> dict:
    # Same seed for each run: same initial weights, same sequence of batches.
    model = build_model(cfg, device, args.seed)
    model.train()
    return {
        "model": model,
        "optimizer": make_optimizer(model, args.lr),
        "gen": torch.Generator().manual_seed(args.seed),
        "pending": [],
        "step_ms": [],
    }


def train_both(args: argparse.Namespace) -> dict[str, dict]:
    """Trains one run per mode, interleaved; returns each run's losses and ms/step."""
    device = parse_device(args.device)
    tokenizer = get_tokenizer()
    cfg = GPTConfig(
        vocab_size=tokenizer.vocab_size,
        n_layer=args.n_layer,
        n_head=args.n_head,
        d_model=args.d_model,
        seq_len=args.seq_len,
    )
    runs = {amp: new_run(args, device, cfg) for amp in MODES}
    mark, elapsed = step_clock(device)
    timed = []  # (mode, start mark, end mark)
    for step in range(args.steps):
        order = MODES if step % 2 == 0 else MODES[::-1]
        for amp in order:
            run = runs[amp]
            start = mark()
            x, y = get_batch("train", args.batch, args.seq_len, device, run["gen"])
            loss = train_step(run["model"], run["optimizer"], x, y, AMP_DTYPES[amp])
            run["pending"].append(loss)
            # The first steps pay one-time costs (allocator growth, AdamW state,
            # metadata caches) and are not timed.
            if step >= args.warmup:
                timed.append((amp, start, mark()))
    # Losses stay on the device until the end, so no step waits for the one before.
    synchronize(device)
    for amp, a, b in timed:
        runs[amp]["step_ms"].append(elapsed(a, b))
    out = {}
    for amp, run in runs.items():
        step_ms = sorted(run["step_ms"])
        out[amp] = {
            "losses": torch.stack(run["pending"]).float().cpu().tolist(),
            "ms_per_step": step_ms[len(step_ms) // 2],
        }
    return out


def smooth(values: list[float], window: int) -> list[float]:
    """Trailing moving average (shorter at the start)."""
    out = []
    for i in range(len(values)):
        chunk = values[max(0, i - window + 1) : i + 1]
        out.append(sum(chunk) / len(chunk))
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="neuron")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=3, help="untimed first steps")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-layer", type=int, default=GPTConfig.n_layer)
    p.add_argument("--n-head", type=int, default=GPTConfig.n_head)
    p.add_argument("--d-model", type=int, default=GPTConfig.d_model)
    p.add_argument("--print-every", type=int, default=5)
    p.add_argument("--smooth", type=int, default=10, help="moving-average window")
    args = p.parse_args(argv)
    if args.steps <= args.warmup or args.warmup < 0:
        p.error("need 0 <= --warmup < --steps")
    return args


def main() -> None:
    args = parse_args()
    print(
        f"device={args.device} steps={args.steps} (first {args.warmup} untimed) "
        f"batch={args.batch} seq_len={args.seq_len} layers={args.n_layer} "
        f"d_model={args.d_model} lr={args.lr} seed={args.seed}",
        flush=True,
    )
    runs = train_both(args)
    fp32, bf16 = runs["none"]["losses"], runs["bf16"]["losses"]
    s32, s16 = smooth(fp32, args.smooth), smooth(bf16, args.smooth)

    print(f"\n{'step':>5} | {'fp32':>8} {'bf16':>8} | {'fp32 avg':>8} {'bf16 avg':>8} | diff")
    for i in range(len(fp32)):
        step = i + 1
        if step % args.print_every == 0 or step in (1, len(fp32)):
            print(
                f"{step:5d} | {fp32[i]:8.4f} {bf16[i]:8.4f} | "
                f"{s32[i]:8.4f} {s16[i]:8.4f} | {s16[i] - s32[i]:+.4f}"
            )

    # The first window is dominated by the steep initial drop, where a one-step
    # lag shows as a large gap; the comparison starts once the window is full.
    start = min(args.smooth, len(fp32)) - 1
    diffs = [abs(a - b) for a, b in zip(s32[start:], s16[start:], strict=True)]
    raw = [abs(a - b) for a, b in zip(fp32, bf16, strict=True)]
    ms32, ms16 = runs["none"]["ms_per_step"], runs["bf16"]["ms_per_step"]
    print(
        f"\nmax |smoothed fp32 - bf16| (window {args.smooth}, steps {start + 1}-{len(fp32)}): "
        f"{max(diffs):.4f}"
    )
    print(f"max |raw fp32 - bf16| (any step): {max(raw):.4f}")
    print(f"final loss: fp32 {fp32[-1]:.4f}  bf16 {bf16[-1]:.4f}")
    print(
        f"step time (median): fp32 {ms32:.1f} ms  bf16 {ms16:.1f} ms  "
        f"ratio bf16/fp32 {ms16 / ms32:.2f}"
    )


if __name__ == "__main__":
    main()
