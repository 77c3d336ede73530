"""Adaptive eager against plain eager, the CPU and torch.compile, side by side.

Each configuration trains the example GPT in a fresh child process (same seed, same
batches) and reports ms per training step (batch copy, forward, backward, AdamW):

* cpu:      eager on the CPU;
* eager:    plain eager on neuron;
* adaptive: eager on neuron with adaptive eager on (torch.neuron.set_adaptive_eager);
* compiled: torch.compile(backend="neuron") on neuron (--compiled; compiling takes a
            minute or more on a cold Inductor cache).

--generate: Hugging Face ``generate()`` of a small Llama (2 layers, hidden 64, greedy, 32
new tokens after 8) instead: the CPU, plain eager and adaptive eager (target: adaptive
>= 1.3x faster than plain eager), and adaptive eager's statistics per call once warm
(sequences adapted, evicted, replayed; decode windows not adapted: with a growing KV
cache they never come back in reach). --max-fruitless-adaptations N sets the give-up
policy for such sequences (a huge N turns it off: the figures before it);
--static-cache: generate() with a static KV cache (the cache keeps its shape; the
generated ids still grow every token).

--host-cost: host µs per op of a repeated sequence of 11 small ops on the CPU, plain
eager and adaptive eager (the issue: a replayed op should cost the host less than a
plain one).

--chains: two memory-bound chains (issue 33, operator fusion), each in fresh processes
on the CPU, with plain eager and with adaptive eager, ms per call (median of --steps
calls, each followed by torch.neuron.synchronize so each call is one window, after
max(--warmup, 3) warm-up calls: a sequence is adapted after 2 occurrences):

* gelu_ln: ``F.layer_norm(F.gelu(x + b) + r, (1024,), w, lb)`` under no_grad, x and r
  [16384, 1024] fp32 (16M elements), b, w, lb [1024];
* adamw: ``opt.step()`` of torch.optim.AdamW(lr=1e-3, foreach=False, fused=False) over
  4 fp32 parameters of 12.5M elements (50M) with fixed random gradients.

Also the peak device memory over the timed calls (torch.neuron.max_memory_allocated),
the device items one call queues (under the profiler, with their estimated Trainium
time and the sum of their ops'), adaptive eager's statistics per call, and whether the
results (the chain's output; the parameters after every step) of plain and adaptive
eager are bitwise equal (sha256 of their bytes): the script exits 1 if not. Targets
(issue 33): adaptive >= 1.3x faster than plain eager on both chains, adaptive's peak
<= plain's, bitwise equal. ``--chains gelu_ln`` or ``--chains adamw`` runs one.

--estimate: the profiler's estimated Trainium time (--target, default trn2) per GPT
training step, plain eager, adaptive eager and (--compiled) torch.compile: --steps steps
after --warmup under torch.profiler, torch_neuronx.profiling.summary.step_summary's
per-step estimated time (the sum of the top-level device items' estimates: an adaptive
item's or a compiled program's own, one pipeline of its steps, a fused step of adaptive
eager one kernel), beside the sum of the ops' estimates each alone (what they would
cost one by one) and the measured device time. Targets (issue 33): adaptive <= 0.6x plain,
<= 1.25x compiled. Honours --small.

--no-fuse: adaptive eager without fusion (its first stage: held items run one by one),
for any of the above.

Sizes: the default GPT (6 layers, d 256, T 128, batch 8) and, with --small, the small
one (4 layers, d 64, T 32, batch 4). Targets (issue 21): adaptive <= 0.85x CPU and
<= 1.1x compiled on the default GPT; >= 1.3x faster than plain eager on the small one.
Issue 33's target for these: adaptive eager's host wall-clock <= 1.0x plain eager's.

    python benchmarks/adaptive_eager.py --steps 10 --rounds 2 [--small] [--compiled]
    python benchmarks/adaptive_eager.py --chains --steps 10 --rounds 3
    python benchmarks/adaptive_eager.py --estimate --compiled --steps 3 --rounds 1 [--small]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch

try:
    import torch_neuronx
except ImportError:
    pass

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import child_result

from examples.gpt.data import get_batch, get_tokenizer
from examples.gpt.model import GPTConfig
from examples.gpt.train import build_model, make_optimizer, synchronize, train_step

MODES = ("cpu", "eager", "adaptive", "compiled")


def run_generate(mode: str, max_fruitless: int | None = None, static: bool = False) -> dict:
    """ms per generate() call of a small Llama, median of 5 after 2 warm-up calls;
    adaptive eager's statistics over the warm-up calls and per timed call."""
    import os

    os.environ["HF_HUB_OFFLINE"] = "1"
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    transformers.logging.set_verbosity_error()
    cfg = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    device = "cpu" if mode == "cpu" else "neuron"
    model = LlamaForCausalLM(cfg).eval().to(device)
    ids = torch.randint(3, 512, (1, 8)).to(device)
    if mode == "adaptive":
        torch.neuron.set_adaptive_eager(True)
        if max_fruitless is not None:
            torch_neuronx._C._adaptive_configure(0, 0, 0, max_fruitless)

    def generate():
        with torch.no_grad():
            return model.generate(
                ids,
                max_new_tokens=32,
                min_new_tokens=32,
                do_sample=False,
                **({"cache_implementation": "static"} if static else {}),
            )

    t0 = time.perf_counter()
    generate()
    first_ms = (time.perf_counter() - t0) * 1e3
    generate()
    warm = torch.neuron.adaptive_eager_stats() if mode == "adaptive" else None
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        out = generate()
        times.append(time.perf_counter() - t0)
    res = {"ms": statistics.median(times) * 1e3, "loss": float(out[0, -1]), "first_ms": first_ms}
    if mode == "adaptive":
        res["stats"] = stats = torch.neuron.adaptive_eager_stats()
        keys = ("sequences_adapted", "evictions", "sequences_never_replayed", "replays")
        keys += ("windows_not_adapted", "windows")
        res["warm_up"] = {k: warm[k] for k in keys}  # the first 2 calls
        res["per_call"] = {k: (stats[k] - warm[k]) / 5 for k in keys}
    return res


def run_host_cost(mode: str) -> dict:
    """Host µs per op of a repeated sequence of 11 small ops (64x64, never synchronized
    inside): what issuing an op costs while adaptive eager replays it, against plain
    eager; the best of 5 runs of 2000 sequences."""
    device = "cpu" if mode == "cpu" else "neuron"
    x = torch.randn(64, 64, device=device)
    w = torch.randn(64, 64, device=device)

    def sequence():
        y = ((x + 1) * w).relu() - x
        y = (y.sigmoid() @ w).tanh() + w
        return (y.exp() / 3).sum(0)

    if mode == "adaptive":
        torch.neuron.set_adaptive_eager(True)
    for _ in range(200):
        sequence()
    synchronize(torch.device(device))
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(2000):
            sequence()
        best = min(best, time.perf_counter() - t0)
        synchronize(torch.device(device))
    return {"us_per_op": best / (2000 * 11) * 1e6}


CHAINS = ("gelu_ln", "adamw")
CHAIN_TITLES = {
    "gelu_ln": "bias + GELU + residual + LayerNorm, x [16384, 1024] fp32 (16M elements)",
    "adamw": "AdamW step (foreach=False, fused=False), 4 x 12.5M fp32 parameters (50M)",
}


def _digest(tensors: list[torch.Tensor]) -> str:
    """sha256 of the tensors' bytes: equal digests = bitwise equal tensors."""
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _top_level_items() -> tuple[list[dict], list[dict], list[dict]]:
    """The device items of the last profile: (top-level items, the ops, fused steps).

    The ops are the items without children (not engines, not fused steps), each
    with its estimate alone: an op that ran inside a fused step of adaptive eager
    (``fused_into`` >= 0) is one of them, at what it would cost one by one. A top-level
    item's estimate is its own (an adaptive item's or a compiled program's: one
    pipeline of its steps, a fused step one kernel)."""
    items = torch_neuronx._C._profiler_items()
    parents = {i["parent"] for i in items if i["parent"] >= 0}
    top = [i for i in items if i["parent"] < 0 and i["category"] != "engine"]
    ops = [
        i
        for n, i in enumerate(items)
        if n not in parents and i["category"] not in ("engine", "fused")
    ]
    fused = [i for i in items if i["category"] == "fused"]
    return top, ops, fused


def _collapse(names: list[str]) -> str:
    """['a', 'a', 'b'] -> 'a x2, b' (runs of the same name); a list that is one
    pattern repeated k times -> '(pattern) x k'."""
    for period in range(2, len(names) // 2 + 1):
        if len(names) % period == 0 and names == names[:period] * (len(names) // period):
            return f"({_collapse(names[:period])}) x{len(names) // period}"
    out: list[list] = []
    for name in names:
        if out and out[-1][0] == name:
            out[-1][1] += 1
        else:
            out.append([name, 1])
    return ", ".join(f"{n} x{k}" if k > 1 else n for n, k in out)


def run_chain(mode: str, chain: str, args: argparse.Namespace) -> dict:
    """One memory-bound chain in this process: ms per call (median of args.steps calls,
    each followed by a synchronize, after >= 3 warm-up calls: the sequence is adapted
    after 2), host ms per call (issuing it), peak device memory over the timed calls,
    a digest of the result (the chain's output; the parameters after every step), and,
    on neuron, one more call under the profiler: its top-level device items, their
    estimated trn2 time and the sum of their ops' estimates."""
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    device = torch.device("cpu" if mode == "cpu" else "neuron")
    if device.type == "neuron":
        torch_neuronx._C._profiler_set_target(args.target)
    gen = torch.Generator().manual_seed(args.seed)
    if chain == "gelu_ln":
        rows, d = 16384, 1024
        x, r = (torch.randn(rows, d, generator=gen).to(device) for _ in range(2))
        b, w, lb = (torch.randn(d, generator=gen).to(device) for _ in range(3))
        out: list[torch.Tensor] = []

        def call() -> None:
            with torch.no_grad():
                out[:] = [F.layer_norm(F.gelu(x + b) + r, (d,), w, lb)]

    else:
        n = 12_500_000
        params = [torch.randn(n, generator=gen).to(device).requires_grad_() for _ in range(4)]
        for p in params:
            p.grad = torch.randn(n, generator=gen).to(device)
        opt = torch.optim.AdamW(params, lr=1e-3, foreach=False, fused=False)
        out = params

        def call() -> None:
            opt.step()

    if mode == "adaptive":
        torch.neuron.set_adaptive_eager(True)
    for _ in range(max(args.warmup, 3)):
        call()
        synchronize(device)
    if device.type == "neuron":
        torch.neuron.reset_peak_memory_stats()
        warm = torch.neuron.adaptive_eager_stats()
    times, host = [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        call()
        h = time.perf_counter()
        synchronize(device)
        times.append(time.perf_counter() - t0)
        host.append(h - t0)
    res = {"ms": statistics.median(times) * 1e3, "host_ms": statistics.median(host) * 1e3}
    if device.type != "neuron":
        call()  # as many calls as on neuron (its last one is profiled)
        res["digest"] = _digest(out)
        return res
    res["peak_mib"] = torch.neuron.max_memory_allocated() / 2**20
    stats = torch.neuron.adaptive_eager_stats()
    if mode == "adaptive":
        keys = ("windows", "replays", "deviations", "items_in_replays", "sequences_adapted")
        res["per_call"] = {k: (stats[k] - warm[k]) / args.steps for k in keys}
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]):
        call()
        synchronize(device)
    top, leaves, _ = _top_level_items()
    res["items"] = _collapse([i["name"] for i in top])
    res["est_ms"] = sum(max(i["estimate_ns"], 0) for i in top) / 1e6
    res["est_ops_ms"] = sum(max(i["estimate_ns"], 0) for i in leaves) / 1e6
    res["fallback_ops"] = torch_neuronx.get_fallback_ops()
    res["digest"] = _digest(out)  # the output of the last (profiled) call / every step
    return res


def run_estimate(mode: str, args: argparse.Namespace) -> dict:
    """The profiler's estimated Trainium time of the example GPT's training step: after
    args.warmup steps, args.steps steps (no synchronize inside, as in training) under
    torch.profiler; summary.step_summary's estimated time per step (the sum of the
    top-level device items' estimates / steps: the profiler's own, an adaptive item one
    pipeline of its steps), the sum of the ops' estimates alone (the ops inside an
    adaptive or compiled item, inside a fused step too) and the measured device time
    per step."""
    from torch.profiler import ProfilerActivity, profile

    from torch_neuronx.profiling import summary

    torch_neuronx._C._profiler_set_target(args.target)
    device = torch.device("neuron")
    cfg, batch, model, optimizer, step = _gpt_training(mode, args, device)
    gen = torch.Generator().manual_seed(args.seed)
    t0 = time.perf_counter()
    for _ in range(args.warmup):
        x, y = get_batch("train", batch, cfg.seq_len, device, gen)
        step(model, optimizer, x, y)
    synchronize(device)
    warm_s = time.perf_counter() - t0
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        for _ in range(args.steps):
            x, y = get_batch("train", batch, cfg.seq_len, device, gen)
            loss = step(model, optimizer, x, y)
        synchronize(device)
    s = summary.step_summary(prof, steps=args.steps)
    top, leaves, fused = _top_level_items()
    kinds: dict[str, int] = {}
    for i in top:
        kind = "adaptive" if i["name"].startswith("adaptive ") else i["category"]
        kinds[kind] = kinds.get(kind, 0) + 1
    if fused:
        kinds["fused steps in them"] = len(fused)
    return {
        "target": s["target"]["name"],
        "est_ms": s["per_step"]["estimated_ns"] / 1e6,
        "est_ops_ms": sum(max(i["estimate_ns"], 0) for i in leaves) / 1e6 / args.steps,
        "measured_ms": s["per_step"]["measured_ns"] / 1e6,
        "items_per_step": {k: v / args.steps for k, v in kinds.items()},
        "without_estimate": s["items_without_estimate"],
        "loss": loss.item(),
        "warm_s": warm_s,
    }


def _gpt_training(mode: str, args: argparse.Namespace, device: torch.device):
    """The example GPT (--small: the small one) on `device` in training mode, its
    AdamW, its batch size and the step `mode` runs (compiled, or with adaptive eager
    on): (cfg, batch, model, optimizer, step)."""
    vocab = get_tokenizer().vocab_size
    if args.small:
        cfg = GPTConfig(vocab_size=vocab, seq_len=32, n_layer=4, n_head=4, d_model=64)
        batch = 4
    else:
        cfg = GPTConfig(vocab_size=vocab, seq_len=args.seq_len)
        batch = args.batch
    model = build_model(cfg, device, args.seed)
    optimizer = make_optimizer(model, 3e-4)
    model.train()
    step = torch.compile(train_step, backend="neuron") if mode == "compiled" else train_step
    if mode == "adaptive":
        torch.neuron.set_adaptive_eager(True)
    return cfg, batch, model, optimizer, step


def run_one(mode: str, args: argparse.Namespace) -> dict:
    if args.no_fuse:  # adaptive eager's first stage alone: held items, not fused
        torch.neuron.set_adaptive_eager(False, fuse=False)
    if args.chains:
        return run_chain(mode, args.chains, args)
    if args.estimate:
        return run_estimate(mode, args)
    if args.host_cost:
        return run_host_cost(mode)
    if args.generate:
        return run_generate(mode, args.max_fruitless_adaptations, args.static_cache)
    device = torch.device("cpu" if mode == "cpu" else "neuron")
    cfg, batch, model, optimizer, step = _gpt_training(mode, args, device)
    gen = torch.Generator().manual_seed(args.seed)
    t_first = time.perf_counter()
    for i in range(args.warmup):
        x, y = get_batch("train", batch, cfg.seq_len, device, gen)
        step(model, optimizer, x, y)
        if i == 0:
            synchronize(device)
            first_ms = (time.perf_counter() - t_first) * 1e3
    synchronize(device)
    t0 = time.perf_counter()
    host = 0.0  # time the host spends issuing the steps (the rest: waiting)
    for _ in range(args.steps):
        x, y = get_batch("train", batch, cfg.seq_len, device, gen)
        h0 = time.perf_counter()
        loss = step(model, optimizer, x, y)
        host += time.perf_counter() - h0
    synchronize(device)
    ms = (time.perf_counter() - t0) / args.steps * 1e3
    out = {"ms": ms, "loss": loss.item(), "first_ms": first_ms}
    out["host_ms"] = host / args.steps * 1e3
    if mode == "adaptive":
        out["stats"] = torch.neuron.adaptive_eager_stats()
    return out


def run_child(mode: str, args: argparse.Namespace, chain: str | None = None) -> dict:
    """run_one(mode) in a fresh interpreter (same seed, same batches): its result."""
    cmd = ["--one", mode, "--steps", str(args.steps)]
    cmd += ["--warmup", str(args.warmup), "--batch", str(args.batch)]
    cmd += ["--seq-len", str(args.seq_len), "--seed", str(args.seed)]
    for flag in ("small", "generate", "host_cost", "static_cache", "estimate", "no_fuse"):
        if getattr(args, flag):
            cmd.append("--" + flag.replace("_", "-"))
    if chain:
        cmd += ["--chains", chain]
    cmd += ["--target", args.target]
    if args.max_fruitless_adaptations is not None:
        cmd += ["--max-fruitless-adaptations", str(args.max_fruitless_adaptations)]
    return child_result.run_child(__file__, cmd, timeout=None)


def main_chains(args: argparse.Namespace) -> int:
    """--chains: each chain on the CPU, plain eager and adaptive eager, fresh processes;
    1 when plain and adaptive eager's results are not bitwise equal."""
    chains = CHAINS if args.chains == "all" else (args.chains,)
    modes = ("cpu", "eager", "adaptive")
    print(
        f"memory-bound chains: ms per call (synchronized), median of {args.steps} calls "
        f"after {max(args.warmup, 3)} warm-up calls, {args.rounds} rounds, fresh processes"
    )
    failed = False
    for chain in chains:
        print(f"{chain}: {CHAIN_TITLES[chain]}", flush=True)
        res: dict[str, list[dict]] = {m: [] for m in modes}
        for _ in range(args.rounds):
            for mode in modes:
                r = run_child(mode, args, chain)
                res[mode].append(r)
                peak = f"  peak {r['peak_mib']:.0f} MiB" if "peak_mib" in r else ""
                est = (
                    f"  est. {args.target} {r['est_ms']:.3f} ms (its ops {r['est_ops_ms']:.3f})"
                    if "est_ms" in r
                    else ""
                )
                print(
                    f"  {mode:<9} {r['ms']:8.1f} ms  host {r['host_ms']:6.1f} ms{peak}{est}",
                    flush=True,
                )
        med = {m: statistics.median(r["ms"] for r in res[m]) for m in modes}
        peak = {m: max(r["peak_mib"] for r in res[m]) for m in ("eager", "adaptive")}
        print(
            "  medians: "
            + ", ".join(f"{m} {v:.1f} ms" for m, v in med.items())
            + f"   plain / adaptive: {med['eager'] / med['adaptive']:.2f} (target >= 1.3)"
        )
        print(
            f"  peak device memory: plain {peak['eager']:.0f} MiB, adaptive "
            f"{peak['adaptive']:.0f} MiB (target: adaptive <= plain)"
        )
        digests = {m: {r["digest"] for r in res[m]} for m in modes}
        same = len(digests["eager"] | digests["adaptive"]) == 1
        cpu_same = digests["cpu"] == digests["eager"]
        print(
            f"  bitwise plain == adaptive: {'yes' if same else 'NO'}"
            f"   (plain == CPU: {'yes' if cpu_same else 'no'})"
        )
        failed |= not same
        for mode in ("eager", "adaptive"):
            r = res[mode][-1]
            print(f"  {mode} device items per call: {r['items']}")
            if r["fallback_ops"]:
                print(f"  {mode} CPU fallback ops: {r['fallback_ops']}")
        per_call = res["adaptive"][-1].get("per_call")
        if per_call:
            print(
                "  adaptive per timed call: " + ", ".join(f"{k} {v:g}" for k, v in per_call.items())
            )
    if failed:
        print("FAILED: plain and adaptive eager's results differ", file=sys.stderr)
    return int(failed)


def main_estimate(args: argparse.Namespace) -> None:
    """--estimate: estimated Trainium time per GPT training step, per mode."""
    modes = ["eager", "adaptive"] + (["compiled"] if args.compiled else [])
    size = "small GPT (d64 L4 T32 b4)" if args.small else "GPT (d256 L6 T128 b8)"
    print(
        f"{size}: the profiler's estimated {args.target} time per training step "
        f"({args.steps} profiled steps after {args.warmup}), {args.rounds} rounds"
    )
    est: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(args.rounds):
        for mode in modes:
            r = run_child(mode, args)
            est[mode].append(r["est_ms"])
            kinds = ", ".join(f"{k} {v:g}" for k, v in r["items_per_step"].items())
            print(
                f"  {mode:<9} est. {r['est_ms']:8.3f} ms/step  (its ops {r['est_ops_ms']:.3f}; "
                f"measured {r['measured_ms']:.1f})  loss {r['loss']:.6f}  "
                f"items/step: {kinds}  warm-up {r['warm_s']:.1f} s",
                flush=True,
            )
            if r["without_estimate"]:
                print(f"            {r['without_estimate']} items without an estimate")
    med = {m: statistics.median(v) for m, v in est.items()}
    print("medians: " + ", ".join(f"{m} {v:.3f} ms" for m, v in med.items()))
    ratios = f"adaptive / plain: {med['adaptive'] / med['eager']:.2f} (target <= 0.6)"
    if "compiled" in med:
        ratios += (
            f"   adaptive / compiled: {med['adaptive'] / med['compiled']:.2f} (target <= 1.25)"
        )
    print(ratios)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--small", action="store_true", help="the small GPT (d64, L4, T32, b4)")
    p.add_argument("--compiled", action="store_true", help="also torch.compile")
    p.add_argument("--generate", action="store_true", help="HF generate() of a small Llama")
    p.add_argument("--host-cost", action="store_true", help="host µs per op of a replayed sequence")
    p.add_argument("--static-cache", action="store_true", help="--generate with a static KV cache")
    p.add_argument(
        "--max-fruitless-adaptations",
        type=int,
        help="adaptive eager's give-up policy for sequences that never come back",
    )
    p.add_argument(
        "--chains",
        nargs="?",
        const="all",
        choices=("all",) + CHAINS,
        help="memory-bound chains (all, or one of them): plain vs adaptive, peaks, bitwise",
    )
    p.add_argument(
        "--estimate",
        action="store_true",
        help="the profiler's estimated Trainium time of the GPT step per mode",
    )
    p.add_argument("--target", default="trn2", help="--estimate's Trainium model (trn1/trn2/trn3)")
    p.add_argument(
        "--no-fuse",
        action="store_true",
        help="adaptive eager without fusion (set_adaptive_eager(True, fuse=False))",
    )
    p.add_argument("--one", choices=MODES, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args)))
        return
    if args.chains:
        sys.exit(main_chains(args))
    if args.estimate:
        main_estimate(args)
        return
    if args.host_cost:
        print(f"host µs per op of a repeated sequence of 11 small ops, {args.rounds} rounds")
        for _ in range(args.rounds):
            row = []
            for mode in ("cpu", "eager", "adaptive"):
                row.append(f"{mode} {run_child(mode, args)['us_per_op']:.2f}")
            print("  " + "   ".join(row), flush=True)
        return
    modes = [m for m in MODES if m != "compiled" or args.compiled]
    if args.generate:
        modes = ["cpu", "eager", "adaptive"]
        cache = "static" if args.static_cache else "dynamic"
        print(
            f"Llama generate() (greedy, 32 new tokens, {cache} KV cache): ms per call, "
            f"{args.rounds} rounds"
        )
    else:
        size = "small GPT (d64 L4 T32 b4)" if args.small else "GPT (d256 L6 T128 b8)"
        print(f"{size}: ms per training step, median of {args.rounds} rounds of {args.steps}")
    results: dict[str, list[float]] = {m: [] for m in modes}
    stats = per_call = None
    for _ in range(args.rounds):
        for mode in modes:
            r = run_child(mode, args)
            results[mode].append(r["ms"])
            what = "ms/call  last token" if args.generate else "ms/step  loss"
            host = f"  host {r['host_ms']:.1f} ms" if "host_ms" in r else ""
            print(
                f"  {mode:<9} {r['ms']:9.1f} {what} {r['loss']:.6f}  first {r['first_ms']:.0f} ms"
                + host,
                flush=True,
            )
            stats = r.get("stats", stats)
            if "per_call" in r:
                per_call = r["warm_up"], r["per_call"]
    med = {m: statistics.median(v) for m, v in results.items()}
    print("medians: " + ", ".join(f"{m} {v:.1f} ms" for m, v in med.items()))
    ratios = [f"adaptive / {m}: {med['adaptive'] / med[m]:.2f}" for m in med if m != "adaptive"]
    print("   ".join(ratios))
    if stats:
        print("adaptive eager stats (last run):", stats)
    if per_call:
        for what, figures in zip(("2 warm-up calls", "per timed call"), per_call, strict=True):
            print(f"  {what}: " + ", ".join(f"{k} {v:g}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
