"""Attention on neuron against the CPU, side by side.

SDPA (eager forward + backward): three runs per shape, each in a fresh child process
(see gpt_step.py on OpenMP pools): the CPU; neuron by default (the CPU's fused
attention kernel as one device op); neuron with ``TORCH_NEURONX_SIMULATE_NKI_ATTENTION=1``
(the NKI flash kernels on the simulator). Prints the median time per step and the
ratios to the CPU. Target: the default neuron/CPU ratio <= 1.0 plus the device's
per-op overhead.

FlexAttention (``--flex``; B=2, H=4, S=256, D=64, causal block mask and a
relative-position score_mod): the cold compile time (Inductor's caches off) and the
time per call of ``torch.compile``'d ``flex_attention``, each in a fresh process: the
CPU's compiled kernel (Inductor's C++ template, forward only: the CPU has no
FlexAttention backward), neuron compiled (the dense form, compile/flex_attention.py)
forward and forward + backward, neuron eager forward + backward, and, as the CPU's
training reference, the same attention written out (scores, bias, mask, softmax)
compiled, forward + backward, on the CPU and on neuron. Ratios to the CPU's compiled
kernel (forward) and to the CPU's compiled written-out attention (forward +
backward). Run from the repo root::

    python benchmarks/attention.py --steps 5            # SDPA and FlexAttention
    python benchmarks/attention.py --only flex --steps 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from child_result import run_child

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


FLEX_SHAPE = (2, 4, 256, 64)
# name: (device, how it runs, backward too)
FLEX_RUNS = {
    "cpu compiled fwd": ("cpu", "compiled", False),
    "neuron compiled fwd": ("neuron", "compiled", False),
    "cpu written-out compiled fwd+bwd": ("cpu", "written-out", True),
    "neuron written-out compiled fwd+bwd": ("neuron", "written-out", True),
    "neuron compiled fwd+bwd": ("neuron", "compiled", True),
    "neuron eager fwd+bwd": ("neuron", "eager", True),
}


def measure_flex(run: str, steps: int) -> dict[str, float]:
    """Cold compile (first call) and per-call time of one FLEX_RUNS entry."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    device, how, backward = FLEX_RUNS[run]
    B, H, S, D = FLEX_SHAPE
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device=device, requires_grad=backward) for _ in range(3))

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def relative_bias(score, b, h, q_idx, kv_idx):
        return score + (q_idx - kv_idx) * 0.01

    if how == "written-out":
        idx = torch.arange(S, device=device)
        bias = (idx[:, None] - idx[None, :]) * 0.01
        keep = idx[:, None] >= idx[None, :]

        def attend(q, k, v):
            scores = q @ k.transpose(-2, -1) / D**0.5 + bias
            return scores.masked_fill(~keep, float("-inf")).softmax(-1) @ v

        fn = torch.compile(attend, backend="inductor" if device == "cpu" else "neuron")
    else:
        block_mask = create_block_mask(causal, B, H, S, S, device=device)
        compiled = (
            torch.compile(flex_attention, backend="inductor" if device == "cpu" else "neuron")
            if how == "compiled"
            else flex_attention
        )

        def fn(q, k, v):
            return compiled(q, k, v, score_mod=relative_bias, block_mask=block_mask)

    def step():
        out = fn(q, k, v)
        if backward:
            out.sum().backward()

    def sync():
        if device == "neuron":
            torch.neuron.synchronize()

    with torch._inductor.config.patch(force_disable_caches=True):
        start = time.perf_counter()
        step()
        sync()
        first = time.perf_counter() - start
    step()
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return {"compile": first, "step": (time.perf_counter() - start) / steps}


def run_children(runs, args, extra: list[str], env_of) -> dict[str, list]:
    """``args.rounds`` rounds of one fresh child per run (alternating: the host's speed
    drifts); each child's last stdout line is its JSON result."""
    results: dict[str, list] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name in runs:
            cmd = [*extra(name), "--steps", str(args.steps)]
            results[name].append(run_child(__file__, cmd, env=env_of(name)))
    return results


def report_flex(args) -> None:
    results = run_children(FLEX_RUNS, args, lambda name: ["--flex-one", name], lambda _: {})
    med = {
        n: {key: statistics.median(r[key] for r in results[n]) for key in ("compile", "step")}
        for n in FLEX_RUNS
    }
    ref = {False: med["cpu compiled fwd"], True: med["cpu written-out compiled fwd+bwd"]}
    print(f"\nFlexAttention {FLEX_SHAPE} (B, H, S, D), causal block mask + relative bias")
    print(f"{'run':<36}{'cold compile s':>16}{'ms per call':>14}  ratios (compile, call)")
    for name, (_, _, backward) in FLEX_RUNS.items():
        m, r = med[name], ref[backward]
        ratio = f"{m['compile'] / r['compile']:.2f}, {m['step'] / r['step']:.2f}"
        print(f"{name:<36}{m['compile']:>16.1f}{m['step'] * 1e3:>14.2f}  {ratio}")
    print("ratios: forward runs to 'cpu compiled fwd', fwd+bwd runs to the CPU's written-out")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", choices=("sdpa", "flex"))
    p.add_argument("--one", help=argparse.SUPPRESS)  # child mode: one device, JSON out
    p.add_argument("--flex-one", help=argparse.SUPPRESS)  # child mode: one FLEX_RUNS entry
    args = p.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.steps)))
        return
    if args.flex_one:
        print(json.dumps(measure_flex(args.flex_one, args.steps)))
        return
    if args.only != "flex":
        report_sdpa(args)
    if args.only != "sdpa":
        report_flex(args)


def report_sdpa(args) -> None:
    results = run_children(
        RUNS, args, lambda name: ["--one", RUNS[name][0]], lambda name: RUNS[name][1]
    )
    print(f"{'shape (B, H, S, D)':<22}" + "".join(f"{n + ' ms':>24}" for n in RUNS) + "  ratios")
    for i, shape in enumerate(SHAPES):
        med = {n: statistics.median(r[i] for r in results[n]) for n in RUNS}
        ratios = ", ".join(f"{n}/cpu {med[n] / med['cpu']:.2f}" for n in RUNS if n != "cpu")
        row = "".join(f"{med[n] * 1e3:>24.1f}" for n in RUNS)
        print(f"{str(shape):<22}{row}  {ratios}")


if __name__ == "__main__":
    main()
