"""A small Llama-style decoder trained on `neuron` with torch.distributed.

Three ways to run the same training (same initial weights, same global batch of
synthetic tokens, same optimizer), whose losses agree to float tolerance:

    python examples/distributed/train_llama.py --mode single
    torchrun --nproc-per-node 2 examples/distributed/train_llama.py --mode ddp
    torchrun --nproc-per-node 4 examples/distributed/train_llama.py --mode fsdp_tp

``ddp`` splits the global batch over 2 ranks (DistributedDataParallel);
``fsdp_tp`` is a 2 x 2 device mesh: tensor parallel inside each pair of ranks
(attention heads and MLP columns split, ``ColwiseParallel``/``RowwiseParallel``)
and FSDP2 (``fully_shard``) across the pairs, each rank holding about a quarter of
the parameters. Rank 0 prints the loss of every step and, with ``--out``, writes
them and the per-rank parameter memory to a JSON file.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.head_dim = dim // heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        # -1 heads: under tensor parallelism a rank holds a share of them.
        q = self.wq(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.attn_norm = RMSNorm(dim)
        self.attn = Attention(dim, heads)
        self.ffn_norm = RMSNorm(dim)
        self.ffn = FeedForward(dim, hidden)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, vocab=256, dim=256, heads=8, hidden=688, layers=4, seq=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def batches(steps: int, global_batch: int, seq: int, vocab: int):
    g = torch.Generator().manual_seed(1234)
    for _ in range(steps):
        # A learnable stream: each next token is the previous one plus 1, with noise.
        start = torch.randint(0, vocab, (global_batch, 1), generator=g)
        tokens = (start + torch.arange(seq + 1)) % vocab
        noise = torch.randint(0, vocab, tokens.shape, generator=g)
        keep = torch.rand(tokens.shape, generator=g) < 0.9
        yield torch.where(keep, tokens, noise)


def param_bytes(model: nn.Module) -> int:
    total = 0
    for p in model.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        total += local.numel() * local.element_size()
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["single", "ddp", "fsdp_tp"], default="single")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8, help="global batch")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    distributed = args.mode != "single"
    rank, world = 0, 1
    if distributed:
        local = int(os.environ["LOCAL_RANK"])
        torch.neuron.set_device(local)
        dist.init_process_group("neuron")
        rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("neuron", torch.neuron.current_device())

    torch.manual_seed(0)
    model = Llama(seq=args.seq)  # on the CPU: every mode starts from these weights
    full_bytes = param_bytes(model)
    dp_rank, dp_size = 0, 1
    if args.mode == "single":
        model = model.to(device)
    elif args.mode == "ddp":
        model = nn.parallel.DistributedDataParallel(model.to(device))
        dp_rank, dp_size = rank, world
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            parallelize_module,
        )

        assert world == 4, "fsdp_tp runs on a 2 x 2 mesh: torchrun --nproc-per-node 4"
        mesh = init_device_mesh("neuron", (2, 2), mesh_dim_names=("dp", "tp"))
        plan = {
            "attn.wq": ColwiseParallel(),
            "attn.wk": ColwiseParallel(),
            "attn.wv": ColwiseParallel(),
            "attn.wo": RowwiseParallel(),
            "ffn.gate": ColwiseParallel(),
            "ffn.up": ColwiseParallel(),
            "ffn.down": RowwiseParallel(),
        }
        for block in model.blocks:
            parallelize_module(block, mesh["tp"], plan)
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
        dp_rank, dp_size = mesh["dp"].get_local_rank(), mesh["dp"].size()
    shard_bytes = param_bytes(model)
    allocated = torch.neuron.memory_allocated()

    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    losses = []
    per_rank = args.batch // dp_size
    for step, tokens in enumerate(batches(args.steps, args.batch, args.seq, 256)):
        mine = tokens[dp_rank * per_rank : (dp_rank + 1) * per_rank].to(device)
        logits = model(mine[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), mine[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        # The global batch's loss: the mean over the data-parallel ranks.
        report = loss.detach()
        if distributed:
            dist.all_reduce(report, op=dist.ReduceOp.AVG)
        losses.append(report.item())
        if rank == 0:
            print(f"step {step:2d}  loss {losses[-1]:.5f}", flush=True)

    if rank == 0:
        print(
            f"parameters: {full_bytes / 2**20:.2f} MiB unsharded, "
            f"{shard_bytes / 2**20:.2f} MiB on this rank ({shard_bytes / full_bytes:.2f}x); "
            f"memory_allocated after sharding {allocated / 2**20:.2f} MiB"
        )
        if args.out:
            with open(args.out, "w") as f:
                json.dump(
                    {
                        "mode": args.mode,
                        "losses": losses,
                        "full_param_bytes": full_bytes,
                        "rank_param_bytes": shard_bytes,
                        "memory_allocated_after_sharding": allocated,
                    },
                    f,
                )
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
