"""Trains TorchTitan's Llama 3 debug model on neuron and on the CPU; plots both losses.

    python examples/torchtitan/train_debug_model.py --steps 30 --out examples/torchtitan

Makes a tokenizer and a c4-format data set in a scratch folder (titan_job.py), runs
``torchtitan.train`` on ``neuron`` and its CPU twin with the same seed — so the same
initial weights and the same batches — and writes ``losses.png`` (both curves in one
figure) and ``runs.json`` (losses and step times), then prints the step times. Extra
arguments go to both TorchTitan runs, e.g. ``--compile.enable --compile.backend
neuron`` (the CPU twin then compiles with Inductor), or
``--activation_checkpoint.mode selective``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import titan_job


def run(root: Path, device: str, steps: int, extra: list[str]) -> titan_job.Log:
    cmd, env = titan_job.command(root, device, *extra, steps=steps)
    env = {**os.environ, **env}
    r = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        sys.exit(f"torchtitan.train on {device} failed:\n{r.stderr[-6000:]}")
    log = titan_job.parse(r.stdout + r.stderr)
    if len(log.losses) != steps:
        sys.exit(f"expected {steps} logged steps on {device}:\n{r.stderr[-4000:]}")
    return log


def plot(runs: dict[str, titan_job.Log], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for (name, log), style in zip(runs.items(), ("-", "--"), strict=False):
        ax.plot(log.steps, log.losses, style, label=name, linewidth=1.6)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    args, extra = parser.parse_known_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="torchtitan-") as scratch:
        root = titan_job.make_assets(Path(scratch))
        runs = {device: run(root, device, args.steps, extra) for device in ("neuron", "cpu")}
    title = "TorchTitan Llama 3 debug model" + (f" ({' '.join(extra)})" if extra else "")
    plot(runs, args.out / "losses.png", title)
    summary = {}
    for device, log in runs.items():
        seconds = log.step_seconds()[1:]  # step 1 includes the warm-up (and compile)
        summary[device] = {
            "losses": log.losses,
            "median_step_ms": 1e3 * statistics.median(seconds),
            "first_step_ms": 1e3 * log.step_seconds()[0],
        }
    (args.out / "runs.json").write_text(json.dumps(summary, indent=1) + "\n")
    worst = max(
        abs(a - b) / abs(b) for a, b in zip(runs["neuron"].losses, runs["cpu"].losses, strict=True)
    )
    for device, s in summary.items():
        print(
            f"{device:>6}: final loss {s['losses'][-1]:.4f}  median step "
            f"{s['median_step_ms']:.0f} ms  (first step {s['first_step_ms']:.0f} ms)"
        )
    ratio = summary["neuron"]["median_step_ms"] / summary["cpu"]["median_step_ms"]
    print(f"neuron/cpu step time: {ratio:.2f}x; largest relative loss difference: {worst:.1e}")
    print(f"wrote {args.out / 'losses.png'} and {args.out / 'runs.json'}")


if __name__ == "__main__":
    main()
