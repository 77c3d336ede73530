"""One rank of the FSDP2 job: torch.distributed.fsdp.fully_shard on a small
transformer, trained for a few steps (SGD with momentum, clip_grad_norm_ across the shards) in
three configurations, each compared with the single-process CPU run of the same
global batch:

- reshard_after_forward=True and False, float32: losses, gradient norms and final
  parameters match the full-batch CPU run;
- MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32): the reference
  runs every rank's slice in bfloat16 on CPU and averages the float32 gradients.

Parameter memory per rank (torch.neuron.memory_allocated) is about 1/world of the
model, and keeping the parameters unsharded after forward costs what it should.
"""

import copy

import torch
import torch.distributed as dist
from common import dev, expect, expect_close, finish, rank, setup, world
from models import TinyTransformer, lm_loss, tokens_for
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

setup()
mesh = init_device_mesh("neuron", (world,))
PER_RANK = 2
STEPS = 4
MAX_NORM = 0.5
LR = 0.1


def nbytes(module):
    return sum(p.numel() * p.element_size() for p in module.parameters())


def reference_step(ref, opt, tokens, mp):
    """One CPU step on the global batch; returns (loss, grad norm, rank losses)."""
    opt.zero_grad(set_to_none=True)
    if mp is None:
        loss = lm_loss(ref(tokens), tokens)
        loss.backward()
        rank_losses = None
    else:
        # Every rank's slice in bfloat16, float32 gradients averaged (reduce_dtype).
        low = copy.deepcopy(ref).to(mp)
        grads = [torch.zeros_like(p) for p in ref.parameters()]
        rank_losses = []
        for r in range(world):
            low.zero_grad(set_to_none=True)
            sl = tokens[r * PER_RANK : (r + 1) * PER_RANK]
            lr_ = lm_loss(low(sl), sl)
            lr_.backward()
            rank_losses.append(lr_.detach())
            for g, p in zip(grads, low.parameters(), strict=True):
                g += p.grad.float() / world
        for p, g in zip(ref.parameters(), grads, strict=True):
            p.grad = g
        loss = torch.stack(rank_losses).mean()
    norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), MAX_NORM)
    opt.step()
    return loss.detach(), norm, rank_losses


def run(name, reshard_after_forward, mp=None):
    torch.manual_seed(0)
    ref = TinyTransformer()
    model = copy.deepcopy(ref)
    full_bytes = nbytes(model)
    block_bytes = sum(nbytes(b) for b in model.layers)
    kw = dict(mesh=mesh, reshard_after_forward=reshard_after_forward)
    if mp is not None:
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=mp, reduce_dtype=torch.float32)
    for block in model.layers:
        fully_shard(block, **kw)
    fully_shard(model, **kw)
    # The shards' own memory: an allocator delta would depend on when the
    # cycle collector frees the replaced full parameters.
    sharded = sum(p.to_local().untyped_storage().nbytes() for p in model.parameters())
    expect(
        f"{name}: parameters are DTensors sharded on dim 0",
        all(isinstance(p, DTensor) and p.placements[0].is_shard(0) for p in model.parameters()),
    )
    # Each parameter's shard is padded to ceil(rows / world) rows: a little over 1/world.
    share = sharded / full_bytes
    expect(
        f"{name}: parameter memory per rank is about 1/{world} of the model",
        1 / world * 0.95 <= share <= 1 / world * 1.15,
        f"{sharded} of {full_bytes} bytes ({share:.3f})",
    )
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=LR, momentum=0.9)
    forward_cost = None
    for step in range(STEPS):
        tokens = tokens_for(step, PER_RANK * world)
        mine = tokens[rank * PER_RANK : (rank + 1) * PER_RANK].to(dev)
        opt.zero_grad(set_to_none=True)
        torch.neuron.synchronize()
        m0 = torch.neuron.memory_allocated()
        loss = lm_loss(model(mine), mine)
        torch.neuron.synchronize()
        if step == 0:
            forward_cost = torch.neuron.memory_allocated() - m0
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        opt.step()
        want_loss, want_norm, rank_losses = reference_step(ref, ref_opt, tokens, mp)
        avg = loss.detach().clone()
        dist.all_reduce(avg, op=dist.ReduceOp.AVG)
        tol = dict(rtol=1e-5, atol=1e-5) if mp is None else dict(rtol=2e-2, atol=2e-2)
        expect_close(f"{name}: step {step} loss", avg, want_loss, **tol)
        if rank_losses is not None:
            expect_close(f"{name}: step {step} rank loss", loss, rank_losses[rank], **tol)
        expect_close(f"{name}: step {step} grad norm", norm, want_norm, **tol)
        expect(
            f"{name}: step {step} clipping applied",
            float(want_norm) > MAX_NORM,
            float(want_norm),
        )
    ptol = dict(rtol=1e-4, atol=1e-5) if mp is None else dict(rtol=2e-2, atol=5e-3)
    for (n, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        expect_close(f"{name}: parameters after {STEPS} steps ({n})", p, q, **ptol)
    del model, opt
    return forward_cost, block_bytes


kept, block_bytes = run("reshard_after_forward=False", False)
freed, _ = run("reshard_after_forward=True", True)
# Only the blocks reshard after forward (the root keeps its parameters for backward);
# kept unsharded, they hold their all-gathered (full) parameters besides the shards.
extra = kept - freed
want = block_bytes
expect(
    "blocks kept unsharded after forward hold their full parameters",
    0.95 * want <= extra <= 1.25 * want,
    f"{extra} bytes, expected about {want:.0f}",
)
run("mixed precision bf16/fp32", True, torch.bfloat16)

finish()
