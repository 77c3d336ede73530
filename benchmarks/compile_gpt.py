"""torch.compile on neuron: GPT training steps, compiled vs eager, neuron vs CPU.

Measured side by side in one run, from the repo root::

    python benchmarks/compile_gpt.py            # both GPT sizes, 2 rounds (~5 min)
    python benchmarks/compile_gpt.py --quick    # the small GPT, 1 round

For each GPT size, four variants train the same model (same seed, weights and
batches; AdamW as in examples/gpt/train.py): eager CPU, ``torch.compile`` with
Inductor on CPU tensors, eager neuron, and ``torch.compile(backend="neuron")`` on
neuron tensors (model forward and backward and the AdamW step compiled), and the
same with ``mode="reduce-overhead"`` (each compiled graph captured once, then
replayed: torch.neuron graphs; AdamW with ``capturable=True``). A step is
the whole iteration (batch, forward, backward, AdamW). Each variant runs in a fresh
child process (libgomp slows whichever of two OpenMP users in one process runs second;
see gpt_step.py), warms up, then times --steps steps; rounds alternate the order, and
medians of the rounds are reported.

Sizes: ``default`` is the example's GPT (6 layers, d=256, T=128, batch 8, matmul-bound);
``small`` is overhead-bound (4 layers, d=64, T=32, batch 4, 4 heads).

Compile time: the first step of a compiled variant in a fresh process with an empty
Inductor cache (cold) and again in a new process with that cache (warm).

Targets (issue 10): compiled neuron <= 1.05x Inductor-CPU (both sizes); on the small
GPT compiled neuron >= 1.5x faster than eager neuron; cold compile <= 1.5x
Inductor-CPU's; warm start <= 25% of cold.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

try:
    import torch_neuronx  # noqa: F401
except ImportError:
    pass

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from child_result import run_child

from examples.gpt.data import get_batch, get_tokenizer
from examples.gpt.model import GPTConfig
from examples.gpt.train import (
    build_model,
    compile_model,
    compile_optimizer,
    make_optimizer,
    parse_device,
    synchronize,
    train_step,
)

SIZES = {
    "default": {"n_layer": 6, "n_head": 8, "d_model": 256, "seq_len": 128, "batch": 8},
    "small": {"n_layer": 4, "n_head": 4, "d_model": 64, "seq_len": 32, "batch": 4},
}
VARIANTS = [
    "cpu:eager",
    "cpu:compiled",
    "neuron:eager",
    "neuron:compiled",
    "neuron:reduce-overhead",
]


def run_one(variant: str, size: str, steps: int, warmup: int, seed: int) -> dict:
    device_name, mode = variant.split(":")
    device = parse_device(device_name)
    s = SIZES[size]
    cfg = GPTConfig(
        vocab_size=get_tokenizer().vocab_size,
        n_layer=s["n_layer"],
        n_head=s["n_head"],
        d_model=s["d_model"],
        seq_len=s["seq_len"],
    )
    model = build_model(cfg, device, seed)
    captures = mode == "reduce-overhead"
    optimizer = make_optimizer(model, 3e-4, capturable=captures)
    step_model = model
    if mode in ("compiled", "reduce-overhead"):
        step_model = compile_model(model, device, "reduce-overhead" if captures else None)
        compile_optimizer(optimizer, device, "reduce-overhead" if captures else None)
    gen = torch.Generator().manual_seed(seed)

    def step():
        x, y = get_batch("train", s["batch"], s["seq_len"], device, gen)
        return train_step(step_model, optimizer, x, y)

    t0 = time.perf_counter()
    step()
    synchronize(device)
    first = time.perf_counter() - t0
    for _ in range(warmup):
        step()
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    synchronize(device)
    ms = (time.perf_counter() - t0) / steps * 1e3
    return {"ms": ms, "first_s": first, "loss": loss.item()}


def child(variant: str, size: str, args, cache_dir: str, timeout: float = 900) -> dict:
    cmd = ["--one", variant, "--size", size]
    cmd += ["--steps", str(args.steps_for[size]), "--warmup", str(args.warmup)]
    cmd += ["--seed", str(args.seed)]
    return run_child(__file__, cmd, env={"TORCHINDUCTOR_CACHE_DIR": cache_dir}, timeout=timeout)


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISS"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small GPT only, one round")
    p.add_argument("--sizes", help="comma-separated: default,small")
    p.add_argument("--rounds", type=int, help="alternating rounds (default 2, --quick 1)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--size", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        res = run_one(args.one, args.size, args.steps, args.warmup, args.seed)
        print(json.dumps(res), flush=True)
        return 0

    sizes = (args.sizes or ("small" if args.quick else "default,small")).split(",")
    rounds = args.rounds or (1 if args.quick else 2)
    args.steps_for = {"default": 8, "small": 40}
    print(
        f"torch {torch.__version__}, {os.cpu_count()} CPUs; {rounds} round(s); "
        f"steps per run: {args.steps_for}",
        flush=True,
    )
    failed = False
    with tempfile.TemporaryDirectory(prefix="compile_gpt_") as tmp:
        for size in sizes:
            s = SIZES[size]
            print(f"\n== GPT {size}: {s}", flush=True)
            # Compile times: a fresh cache (cold), then a new process with it (warm).
            first: dict[str, dict[str, float]] = {}
            for variant in ("cpu:compiled", "neuron:compiled"):
                cache = os.path.join(tmp, f"{size}-{variant.replace(':', '-')}")
                cold = child(variant, size, args, cache)["first_s"]
                warm = child(variant, size, args, cache)["first_s"]
                first[variant] = {"cold": cold, "warm": warm}
                print(
                    f"  {variant:<16} first step: cold {cold:6.1f} s, warm {warm:6.1f} s",
                    flush=True,
                )
            runs: dict[str, list[float]] = {v: [] for v in VARIANTS}
            losses: dict[str, float] = {}
            shared_cache = os.path.join(tmp, f"{size}-shared")
            for rnd in range(rounds):
                order = VARIANTS if rnd % 2 == 0 else VARIANTS[::-1]
                for variant in order:
                    res = child(variant, size, args, shared_cache)
                    runs[variant].append(res["ms"])
                    losses[variant] = res["loss"]
                    print(
                        f"  round {rnd + 1} {variant:<16} {res['ms']:9.2f} ms/step  "
                        f"loss {res['loss']:.6f}",
                        flush=True,
                    )
            med = {v: statistics.median(x) for v, x in runs.items()}
            print("  -- medians (ms/step): " + ", ".join(f"{v} {m:.2f}" for v, m in med.items()))
            r_ind = med["neuron:compiled"] / med["cpu:compiled"]
            ok = r_ind <= 1.05
            failed |= not ok
            print(f"  compiled neuron / Inductor-CPU: {r_ind:.2f} (<= 1.05) {verdict(ok)}")
            print(f"  Inductor-CPU / eager CPU:       {med['cpu:compiled'] / med['cpu:eager']:.2f}")
            speedup = med["neuron:eager"] / med["neuron:compiled"]
            if size == "small":
                ok = speedup >= 1.5
                failed |= not ok
                print(f"  eager neuron / compiled neuron: {speedup:.2f} (>= 1.5) {verdict(ok)}")
            else:
                print(f"  eager neuron / compiled neuron: {speedup:.2f}")
            cold_ratio = first["neuron:compiled"]["cold"] / first["cpu:compiled"]["cold"]
            warm_frac = first["neuron:compiled"]["warm"] / first["neuron:compiled"]["cold"]
            ok_c, ok_w = cold_ratio <= 1.5, warm_frac <= 0.25
            failed |= not (ok_c and ok_w)
            print(
                f"  cold compile neuron / Inductor-CPU: {cold_ratio:.2f} (<= 1.5) "
                f"{verdict(ok_c)}; warm start / cold: {warm_frac:.0%} (<= 25%) {verdict(ok_w)}"
            )
            ro = med["neuron:compiled"] / med["neuron:reduce-overhead"]
            print(f"  compiled neuron / reduce-overhead neuron: {ro:.2f}")
            print(
                f"  reduce-overhead neuron / Inductor-CPU: "
                f"{med['neuron:reduce-overhead'] / med['cpu:compiled']:.2f}"
            )
            d = abs(losses["neuron:compiled"] - losses["neuron:eager"])
            print(f"  loss |compiled - eager| on neuron after the timed steps: {d:.2e}")
            d = abs(losses["neuron:reduce-overhead"] - losses["neuron:eager"])
            print(f"  loss |reduce-overhead - eager| on neuron: {d:.2e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
