"""NKI on the simulated NeuronCore: how fast the simulator runs kernels (vs
the same computation in PyTorch on the CPU, in the same run), and what its
cost model estimates for them (vs the latencies the NKI tutorials publish).

From the repo root::

    python benchmarks/nki_kernels.py            # everything (~3 min)
    python benchmarks/nki_kernels.py --quick    # skip the tutorial-size estimates

Simulation speed (targets, issue 11):
- the library's tiled matmul, 2048 x 2048 x 2048 bf16, on neuron tensors:
  FLOP/s >= 25% of torch.mm's on CPU tensors;
- flash attention forward, B=1, H=8, S=2048, D=128: time <= 4x CPU
  scaled_dot_product_attention's (fp32 and bf16).
Times are medians of --repeat steady-state calls (the kernel's trace is
cached after its first call, reported separately).

Cost model vs published figures: the NKI matrix-multiplication tutorial
measured its four kernels on one Trainium1 NeuronCore at
[4096, 8192] x [8192, 8192] bf16. The same four structures (written here in
the tutorial's style) are traced at that size and estimated with the
Trainium1 parameters (target="trn1"); nothing runs.
"""

from __future__ import annotations

import argparse
import statistics
import time

import nki.language as nl
import torch
import torch.nn.functional as F

import torch_neuronx.nki as tnki
from torch_neuronx.estimate.published_figures import FIGURES
from torch_neuronx.estimate.validation_kernels import MATMUL_TUTORIAL
from torch_neuronx.nki.kernels import flash_attention_fwd, tiled_matmul

# The NKI matmul tutorial's four kernels and their published Trainium1 times:
# one copy, the validation table's (torch_neuronx/estimate).
TUTORIAL_KERNELS = MATMUL_TUTORIAL
PUBLISHED_TRN1_MS = {
    f.name.removeprefix("nki-matmul-"): f.published
    for f in FIGURES
    if f.name.startswith("nki-matmul-")
}


def timed(fn, repeat):
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def sync_neuron(fn):
    def run():
        fn()
        torch.neuron.synchronize()

    return run


def bench_matmul(repeat):
    n = 2048
    a = torch.randn(n, n, dtype=torch.bfloat16)
    b = torch.randn(n, n, dtype=torch.bfloat16)
    an, bn = a.to("neuron"), b.to("neuron")
    t0 = time.perf_counter()
    out = tiled_matmul(an, bn)
    torch.neuron.synchronize()
    first = time.perf_counter() - t0
    ref = a.float().T @ b.float()
    err = ((out.cpu().float() - ref).abs().max() / ref.abs().max()).item()
    at = a.T.contiguous()  # torch.mm on the same operands, the same layout
    t_sim = timed(sync_neuron(lambda: tiled_matmul(an, bn)), repeat)
    t_cpu = timed(lambda: torch.mm(at, b), repeat)
    flops = 2 * n**3
    ratio = t_cpu / t_sim
    print(
        f"tiled matmul {n}^3 bf16: simulator {t_sim * 1e3:.1f} ms "
        f"({flops / t_sim / 1e9:.0f} GFLOP/s), torch.mm CPU {t_cpu * 1e3:.1f} ms "
        f"({flops / t_cpu / 1e9:.0f} GFLOP/s): {100 * ratio:.0f}% of torch.mm "
        f"[target >= 25%: {'ok' if ratio >= 0.25 else 'MISS'}]; first call (trace) "
        f"{first * 1e3:.0f} ms; max error {err:.1e} of max |C| (bf16 result)"
    )
    print("  cost model:", str(tiled_matmul.last_profile).replace("\n", "\n  "))


def bench_flash(repeat):
    B, H, S, D = 1, 8, 2048, 128
    for dtype in (torch.float32, torch.bfloat16):
        q, k, v = (torch.randn(B, H, S, D, dtype=dtype) for _ in range(3))
        qn, kn, vn = q.to("neuron"), k.to("neuron"), v.to("neuron")
        t0 = time.perf_counter()
        o, _ = flash_attention_fwd[B, H](qn, kn, vn)
        torch.neuron.synchronize()
        first = time.perf_counter() - t0
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
        err = (o.cpu().float() - ref).abs().max().item()
        t_sim = timed(sync_neuron(lambda a=(qn, kn, vn): flash_attention_fwd[B, H](*a)), repeat)
        t_cpu = timed(lambda a=(q, k, v): F.scaled_dot_product_attention(*a), repeat)
        r = t_sim / t_cpu
        print(
            f"flash attention fwd B={B} H={H} S={S} D={D} {str(dtype)[6:]}: simulator "
            f"{t_sim * 1e3:.0f} ms, CPU SDPA {t_cpu * 1e3:.0f} ms: {r:.2f}x "
            f"[target <= 4x: {'ok' if r <= 4 else 'MISS'}]; first call {first * 1e3:.0f} ms;"
            f" max |err| {err:.2e}"
        )
    print("  cost model:", str(flash_attention_fwd.last_profile).replace("\n", "\n  "))


def check_tutorial_kernels():
    """The four kernels compute the product (small size, simulated)."""
    a = torch.randn(1024, 256, dtype=torch.bfloat16)
    b = torch.randn(1024, 2048, dtype=torch.bfloat16)
    ref = a.float().T @ b.float()
    for name, k in TUTORIAL_KERNELS.items():
        kw = {"bm": 2, "bn": 2, "bk": 4} if name == "fully_optimized" else {}
        out = k(a.to("neuron"), b.to("neuron"), **kw).cpu().float()
        err = ((out - ref).abs().max() / ref.abs().max()).item()
        assert err < 2e-2, (name, err)


def cost_model_vs_published():
    spec_l = tnki.typing.tensor[[8192, 4096], nl.bfloat16]
    spec_r = tnki.typing.tensor[[8192, 8192], nl.bfloat16]
    flops = 2 * 4096 * 8192 * 8192
    print(
        "cost model vs the NKI matmul tutorial ([4096, 8192] x [8192, 8192] bf16, "
        "one Trainium1 NeuronCore):"
    )
    for name, k in TUTORIAL_KERNELS.items():
        t0 = time.perf_counter()
        p = tnki.estimate(k, spec_l, spec_r, target="trn1")
        took = time.perf_counter() - t0
        ms = p.total_us / 1e3
        pub = PUBLISHED_TRN1_MS[name]
        busy = ", ".join(f"{e} {v:.0f}%" for e, v in p.busy_percent.items() if v >= 1)
        print(
            f"  {name:<22} estimated {ms:7.2f} ms, published {pub:6.2f} ms "
            f"(x{ms / pub:.2f}); {flops / p.total_us / 1e6:5.1f} TFLOP/s; busy: {busy}; "
            f"{p.num_instructions} instructions, traced+estimated in {took:.1f} s"
        )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    bench_matmul(args.repeat)
    bench_flash(args.repeat)
    check_tutorial_kernels()
    if not args.quick:
        cost_model_vs_published()


if __name__ == "__main__":
    main()
