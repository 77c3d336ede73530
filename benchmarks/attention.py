"""Eager attention (SDPA forward + backward) on neuron against the CPU, side by side.

Three runs per shape, each in a fresh child process (see gpt_step.py on OpenMP pools):
the CPU; neuron by default (the CPU's fused attention kernel as one device op); neuron
with ``TORCH_NEURONX_SIMULATE_NKI_ATTENTION=1`` (the NKI flash kernels on the
simulator). Prints the median time per step and the ratios to the CPU. Target: the
default neuron/CPU ratio <= 1.0 plus the device's per-op overhead. Run from the repo
root::

    python benchmarks/attention.py --steps 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

# (batch, heads, sequence, head dim): a TorchTitan debug model's and a larger one.
SHAPES = [(8, 16, 256, 16), (2, 8, 512, 64)]


def measure(device: str, steps: int) -> list[float]:
    times = []
    for B, H, S, D in SHAPES:
        torch.manual_seed(0)
        q, k, v = (torch.randn(B, H, S, D, device=device, requires_grad=True) for _ in range(3))

        def step(q=q, k=k, v=v):
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()

        step()
        if device == "neuron":
            torch.neuron.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        if device == "neuron":
            torch.neuron.synchronize()
        times.append((time.perf_counter() - start) / steps)
    return times


RUNS = {
    "cpu": ("cpu", {}),
    "neuron": ("neuron", {"TORCH_NEURONX_SIMULATE_NKI_ATTENTION": "0"}),
    "neuron, NKI kernels": ("neuron", {"TORCH_NEURONX_SIMULATE_NKI_ATTENTION": "1"}),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--one", help=argparse.SUPPRESS)  # child mode: one device, JSON out
    args = p.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.steps)))
        return
    results: dict[str, list[list[float]]] = {name: [] for name in RUNS}
    for _ in range(args.rounds):  # alternating: the host's speed drifts
        for name, (device, env) in RUNS.items():
            cmd = [sys.executable, __file__, "--one", device, "--steps", str(args.steps)]
            child_env = {**os.environ, **env}
            out = subprocess.run(
                cmd, env=child_env, check=True, capture_output=True, text=True, timeout=900
            )
            results[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{'shape (B, H, S, D)':<22}" + "".join(f"{n + ' ms':>24}" for n in RUNS) + "  ratios")
    for i, shape in enumerate(SHAPES):
        med = {n: statistics.median(r[i] for r in results[n]) for n in RUNS}
        ratios = ", ".join(f"{n}/cpu {med[n] / med['cpu']:.2f}" for n in RUNS if n != "cpu")
        row = "".join(f"{med[n] * 1e3:>24.1f}" for n in RUNS)
        print(f"{str(shape):<22}{row}  {ratios}")


if __name__ == "__main__":
    main()
