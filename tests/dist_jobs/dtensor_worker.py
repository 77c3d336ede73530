"""One rank of the DTensor job.

``1d`` (2 ranks): init_device_mesh("neuron", (2,)); distribute_tensor, redistribute
between Shard/Replicate/Partial and full_tensor; DTensor ops; random ops under the
RNG tracker; CommDebugMode counts; tensor parallelism (ColwiseParallel,
RowwiseParallel, SequenceParallel, loss_parallel) on an MLP, an attention block and
a small transformer, trained for a few steps and compared with the CPU run.

``2d`` (4 ranks): init_device_mesh("neuron", (2, 2), mesh_dim_names=("dp", "tp")):
sub-meshes, placements on both dims, redistribution across them, and FSDP2 over
"dp" with tensor parallelism over "tp" compared with the CPU run.
"""

import copy
import sys

import torch
import torch.distributed as dist
import torch.distributed.tensor as dt
import torch.nn as nn
import torch.nn.functional as F
from common import dev, expect, expect_close, finish, rank, setup, world
from models import MLP, Attention, Block, TinyTransformer, lm_loss, tokens_for
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import (
    DTensor,
    Partial,
    Replicate,
    Shard,
    distribute_tensor,
)
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)

MODE = sys.argv[1]
setup()
# CommDebugMode counts collectives under the torch.ops.c10d_functional names.
funcol = torch.ops.c10d_functional


def full(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def gathered(t):
    """Every rank's copy of a plain tensor, as a list (CPU)."""
    out = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(out, t.contiguous())
    return [o.cpu() for o in out]


# ------------------------------------------------------------------ 1-d mesh
def basics_1d(mesh):
    x = full((8, 6), 1)
    for pl in ([Shard(0)], [Shard(1)], [Replicate()]):
        d = distribute_tensor(x.to(dev), mesh, pl)
        want_local = x if pl[0].is_replicate() else x.chunk(world, pl[0].dim)[rank]
        expect_close(f"distribute_tensor {pl} local", d.to_local(), want_local, rtol=0, atol=0)
        expect_close(f"distribute_tensor {pl} full_tensor", d.full_tensor(), x, rtol=0, atol=0)
        expect(f"distribute_tensor {pl} device", d.to_local().device == dev, d.to_local().device)
    # uneven: 7 rows over the mesh
    y = full((7, 3), 2)
    d = distribute_tensor(y.to(dev), mesh, [Shard(0)])
    expect_close("uneven Shard(0) full_tensor", d.full_tensor(), y, rtol=0, atol=0)

    s0 = distribute_tensor(x.to(dev), mesh, [Shard(0)])
    moves = [
        ("Shard(0)->Replicate", s0, [Replicate()], funcol.all_gather_into_tensor),
        ("Shard(0)->Shard(1)", s0, [Shard(1)], torch.ops._dtensor.shard_dim_alltoall),
        (
            "Replicate->Shard(1)",
            distribute_tensor(x.to(dev), mesh, [Replicate()]),
            [Shard(1)],
            None,
        ),
    ]
    for name, src, dst, op in moves:
        with CommDebugMode() as cm:
            r = src.redistribute(mesh, dst)
        want_local = x if dst[0].is_replicate() else x.chunk(world, dst[0].dim)[rank]
        expect_close(f"redistribute {name}", r.to_local(), want_local, rtol=0, atol=0)
        counts = cm.get_comm_counts()
        if op is None:
            expect(f"redistribute {name}: no communication", cm.get_total_counts() == 0, counts)
        else:
            expect(
                f"redistribute {name}: one {op}",
                cm.get_total_counts() == 1 and counts.get(op) == 1,
                counts,
            )
    # Partial: every rank holds a term of the sum
    parts = [full((4, 4), 10 + r) for r in range(world)]
    p = DTensor.from_local(parts[rank].to(dev), mesh, [Partial()])
    with CommDebugMode() as cm:
        r = p.redistribute(mesh, [Replicate()])
    expect_close("Partial->Replicate", r.to_local(), sum(parts))
    expect("Partial->Replicate: one all_reduce", cm.get_comm_counts().get(funcol.all_reduce) == 1)
    with CommDebugMode() as cm:
        r = p.redistribute(mesh, [Shard(0)])
    expect_close("Partial->Shard(0)", r.to_local(), sum(parts).chunk(world)[rank])
    expect(
        "Partial->Shard(0): one reduce_scatter",
        cm.get_comm_counts().get(funcol.reduce_scatter_tensor) == 1,
        cm.get_comm_counts(),
    )
    pa = DTensor.from_local(parts[rank].to(dev), mesh, [Partial("avg")])
    expect_close("Partial(avg) full_tensor", pa.full_tensor(), sum(parts) / world)
    expect_close("Partial full_tensor", p.full_tensor(), sum(parts))

    # DTensor ops: sharded matmul, reductions, elementwise, autograd
    a, b = full((8, 5), 3), full((5, 6), 4)
    da = distribute_tensor(a.to(dev), mesh, [Shard(0)]).requires_grad_()
    db = distribute_tensor(b.to(dev), mesh, [Replicate()]).requires_grad_()
    out = torch.relu(da @ db) * 2
    expect_close("Shard @ Replicate", out, torch.relu(a @ b) * 2)
    loss = out.sum()
    expect_close("DTensor sum", loss, (torch.relu(a @ b) * 2).sum(), rtol=1e-5)
    loss.backward()
    ar, br = a.clone().requires_grad_(), b.clone().requires_grad_()
    (torch.relu(ar @ br) * 2).sum().backward()
    expect_close("DTensor grad (Shard)", da.grad, ar.grad)
    expect_close("DTensor grad (Replicate)", db.grad, br.grad, rtol=1e-5)
    dc = distribute_tensor(a.t().contiguous().to(dev), mesh, [Shard(1)])
    expect_close("Shard(1) @ Shard(0)", dc @ da.detach(), a.t() @ a, rtol=1e-5)
    expect_close("mean over sharded dim", da.detach().mean(0), a.mean(0))
    expect_close("softmax on sharded dim", torch.softmax(da.detach(), 0), torch.softmax(a, 0))


def random_1d(mesh):
    from torch.distributed.tensor import _random

    torch.manual_seed(1234)
    s1 = dt.randn(8, 4, device_mesh=mesh, placements=[Shard(0)])
    tracker = _random._rng_tracker
    expect(
        "RNG tracker is offset based",
        type(tracker).__name__ == "OffsetBasedRNGTracker" and tracker.distribute_region_enabled,
        type(tracker),
    )
    local = s1.to_local()
    others = gathered(local)
    expect(
        "Shard(0) random: shards differ",
        all(not torch.equal(others[0], o) for o in others[1:]),
    )
    f1 = s1.full_tensor()
    expect("Shard(0) random: full tensor has distinct rows", len(torch.unique(f1.cpu())) == 32)
    rep = dt.rand(5, 3, device_mesh=mesh, placements=[Replicate()])
    reps = gathered(rep.to_local())
    expect("Replicate random: same on every rank", all(torch.equal(reps[0], o) for o in reps))
    # The device generator stays in step across ranks after DTensor random ops.
    after = gathered(torch.randn(6, device=dev))
    expect("device RNG in step across ranks", all(torch.equal(after[0], o) for o in after))
    # Dropout on a replicated DTensor drops the same elements everywhere.
    ones = distribute_tensor(torch.ones(64, device=dev), mesh, [Replicate()])
    drop = F.dropout(ones, p=0.5, training=True).to_local()
    drops = gathered(drop)
    expect(
        "dropout on Replicate: same mask on every rank",
        all(torch.equal(drops[0], o) for o in drops),
    )
    dsh = F.dropout(distribute_tensor(torch.ones(64, device=dev), mesh, [Shard(0)]), 0.5)
    masks = gathered(dsh.to_local() == 0)
    expect("dropout on Shard: masks differ", not torch.equal(masks[0], masks[1]))
    # Same seed, same ops: the same values.
    torch.manual_seed(1234)
    again = dt.randn(8, 4, device_mesh=mesh, placements=[Shard(0)]).full_tensor()
    expect_close("random DTensor is reproducible", again, f1, rtol=0, atol=0)
    # Sharded initialisation of a parameter.
    w = nn.Parameter(distribute_tensor(torch.empty(16, 8, device=dev), mesh, [Shard(0)]))
    nn.init.uniform_(w, -1, 1)
    wl = w.to_local().detach()
    expect("init.uniform_ on a DTensor: in range", bool(((wl >= -1) & (wl <= 1)).all()))
    ws = gathered(wl)
    expect("init.uniform_ on a DTensor: shards differ", not torch.equal(ws[0], ws[1]))


def tp_mlp_and_attention(mesh):
    torch.manual_seed(0)
    ref = MLP(16, 64)
    mlp = parallelize_module(
        copy.deepcopy(ref).to(dev), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()}
    )
    expect("ColwiseParallel shards up.weight on dim 0", mlp.up.weight.placements == (Shard(0),))
    expect("RowwiseParallel shards down.weight on dim 1", mlp.down.weight.placements == (Shard(1),))
    x = full((3, 5, 16), 20)
    with CommDebugMode() as cm:
        y = mlp(x.to(dev))
    expect(
        "TP MLP forward: one all_reduce",
        cm.get_comm_counts() == {funcol.all_reduce: 1},
        cm.get_comm_counts(),
    )
    yr = ref(x)
    expect_close("TP MLP forward", y, yr, rtol=1e-5)
    expect("TP MLP output is a plain tensor", not isinstance(y, DTensor))
    (y**2).sum().backward()
    (yr**2).sum().backward()
    for (n, p), q in zip(mlp.named_parameters(), ref.parameters(), strict=True):
        expect_close(f"TP MLP grad {n}", p.grad, q.grad, rtol=1e-4, atol=1e-5)

    torch.manual_seed(0)
    ref = Attention(16, 4)
    attn = parallelize_module(
        copy.deepcopy(ref).to(dev),
        mesh,
        {
            "wq": ColwiseParallel(),
            "wk": ColwiseParallel(),
            "wv": ColwiseParallel(),
            "wo": RowwiseParallel(),
        },
    )
    x = full((2, 6, 16), 21)
    y = attn(x.to(dev))
    yr = ref(x)
    expect_close("TP attention forward", y, yr, rtol=1e-5)
    y.sum().backward()
    yr.sum().backward()
    for (n, p), q in zip(attn.named_parameters(), ref.parameters(), strict=True):
        expect_close(f"TP attention grad {n}", p.grad, q.grad, rtol=1e-4, atol=1e-5)


def block_plan(prefix=""):
    return {
        f"{prefix}norm1": SequenceParallel(),
        f"{prefix}attn": PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
        ),
        f"{prefix}attn.wq": ColwiseParallel(),
        f"{prefix}attn.wk": ColwiseParallel(),
        f"{prefix}attn.wv": ColwiseParallel(),
        f"{prefix}attn.wo": RowwiseParallel(output_layouts=Shard(1)),
        f"{prefix}norm2": SequenceParallel(),
        f"{prefix}mlp": PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
        ),
        f"{prefix}mlp.up": ColwiseParallel(),
        f"{prefix}mlp.down": RowwiseParallel(output_layouts=Shard(1)),
    }


def transformer_plan(model):
    plan = {
        "embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "head": ColwiseParallel(
            input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False
        ),
    }
    for i in range(len(model.layers)):
        plan.update(block_plan(f"layers.{i}."))
    return plan


def tp_sequence_parallel_block(mesh):
    torch.manual_seed(0)
    ref = Block(16, 4)
    block = parallelize_module(copy.deepcopy(ref).to(dev), mesh, block_plan())
    x = full((2, 8, 16), 22)
    # Sequence parallel: each rank holds its slice of the sequence.
    with CommDebugMode() as cm:
        y = block(x.chunk(world, 1)[rank].to(dev))
    counts = cm.get_comm_counts()
    expect(
        "SequenceParallel block: 2 all_gathers and 2 reduce_scatters",
        counts.get(funcol.all_gather_into_tensor) == 2
        and counts.get(funcol.reduce_scatter_tensor) == 2
        and cm.get_total_counts() == 4,
        counts,
    )
    yr = ref(x)
    expect_close("SequenceParallel block forward (local slice)", y, yr.chunk(world, 1)[rank])
    (y**2).sum().backward()
    (yr**2).sum().backward()
    for (n, p), q in zip(block.named_parameters(), ref.parameters(), strict=True):
        expect_close(f"SequenceParallel block grad {n}", p.grad, q.grad, rtol=1e-4, atol=1e-5)


def tp_transformer_loss_parallel(mesh, steps=3):
    torch.manual_seed(0)
    ref = TinyTransformer(vocab=32, dim=32, heads=4)
    model = parallelize_module(copy.deepcopy(ref).to(dev), mesh, transformer_plan(ref))
    opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.2, momentum=0.9)
    for step in range(steps):
        tokens = tokens_for(step, 4, seq=8, vocab=32)
        opt.zero_grad()
        logits = model(tokens.to(dev))
        expect(
            f"step {step}: logits sharded on the vocabulary",
            isinstance(logits, DTensor) and logits.placements == (Shard(2),),
            getattr(logits, "placements", type(logits)),
        )
        with loss_parallel():
            loss = lm_loss(logits, tokens.to(dev))
            loss.backward()
        opt.step()
        ref_opt.zero_grad()
        want = lm_loss(ref(tokens), tokens)
        want.backward()
        ref_opt.step()
        expect_close(f"TP transformer step {step}: loss (loss_parallel)", loss, want, rtol=1e-5)
    for (n, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        expect_close(f"TP transformer after {steps} steps: {n}", p, q, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ 2-d mesh
def mesh_2d():
    mesh = init_device_mesh("neuron", (2, 2), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh["dp"], mesh["tp"]
    coord = mesh.get_coordinate()
    expect("2-d mesh shape and names", mesh.shape == (2, 2) and mesh.mesh_dim_names == ("dp", "tp"))
    expect("2-d mesh coordinate", tuple(coord) == (rank // 2, rank % 2), coord)
    expect(
        "sub-meshes",
        dp.size() == 2 and tp.size() == 2 and dp.device_type == "neuron",
        (dp, tp),
    )
    x = full((8, 6), 30)
    d = distribute_tensor(x.to(dev), mesh, [Shard(0), Shard(1)])
    want = x.chunk(2, 0)[coord[0]].chunk(2, 1)[coord[1]]
    expect_close("[Shard(0), Shard(1)] local", d.to_local(), want, rtol=0, atol=0)
    expect_close("[Shard(0), Shard(1)] full_tensor", d.full_tensor(), x, rtol=0, atol=0)
    for dst in ([Replicate(), Shard(0)], [Shard(1), Replicate()], [Replicate(), Replicate()]):
        r = d.redistribute(mesh, dst)
        expect_close(f"redistribute to {dst}", r.full_tensor(), x, rtol=0, atol=0)
        loc = x
        for mdim, pl in enumerate(dst):
            if pl.is_shard():
                loc = loc.chunk(2, pl.dim)[coord[mdim]]
        expect_close(f"redistribute to {dst} local", r.to_local(), loc, rtol=0, atol=0)
    # Partial over "tp", sharded over "dp".
    parts = [full((4, 3), 40 + r) for r in range(world)]
    mine = parts[rank].chunk(1)[0]
    p = DTensor.from_local(mine.to(dev), mesh, [Shard(0), Partial()])
    want_full = torch.cat(
        [parts[2 * i] + parts[2 * i + 1] for i in range(2)]
    )  # dp row i holds rows of rank 2i + tp
    expect_close("[Shard(0), Partial()] full_tensor", p.full_tensor(), want_full)
    with CommDebugMode() as cm:
        r = p.redistribute(mesh, [Shard(0), Replicate()])
    expect_close("[Shard(0), Partial()] -> [Shard(0), Replicate()]", r.full_tensor(), want_full)
    expect("Partial over tp: one all_reduce", cm.get_comm_counts().get(funcol.all_reduce) == 1)
    # a sub-mesh of its own
    s = distribute_tensor(x.to(dev), tp, [Shard(0)])
    expect_close("tp sub-mesh Shard(0)", s.to_local(), x.chunk(2)[coord[1]], rtol=0, atol=0)
    # matmul on the 2-d mesh
    a, b = full((8, 4), 31), full((4, 6), 32)
    da = distribute_tensor(a.to(dev), mesh, [Shard(0), Replicate()])
    db = distribute_tensor(b.to(dev), mesh, [Replicate(), Shard(1)])
    expect_close("2-d matmul", da @ db, a @ b, rtol=1e-5)
    return mesh


def fsdp_tp_2d(mesh, steps=3):
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    ref = TinyTransformer(vocab=32, dim=32, heads=4)
    model = parallelize_module(copy.deepcopy(ref).to(dev), mesh["tp"], transformer_plan(ref))
    for block in model.layers:
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.2, momentum=0.9)
    coord = mesh.get_coordinate()
    for step in range(steps):
        tokens = tokens_for(step, 4, seq=8, vocab=32)
        mine = tokens.chunk(2)[coord[0]].to(dev)  # data parallel over "dp"
        opt.zero_grad()
        with loss_parallel():
            loss = lm_loss(model(mine), mine)
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ref_opt.zero_grad()
        want = lm_loss(ref(tokens), tokens)
        want.backward()
        want_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        ref_opt.step()
        # The loss is replicated over "tp"; the world average is the "dp" average.
        avg = (loss.full_tensor() if isinstance(loss, DTensor) else loss).detach().clone()
        dist.all_reduce(avg, op=dist.ReduceOp.AVG)
        expect_close(f"FSDP+TP step {step}: loss", avg, want, rtol=1e-5)
        expect_close(f"FSDP+TP step {step}: grad norm", norm, want_norm, rtol=1e-5)
    for (n, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        expect(f"FSDP+TP {n} is 2-d", p.device_mesh.ndim == 2, p.placements)
        expect_close(f"FSDP+TP after {steps} steps: {n}", p, q, rtol=1e-4, atol=1e-5)


if MODE == "1d":
    mesh = init_device_mesh("neuron", (world,))
    expect("mesh device type", mesh.device_type == "neuron", mesh.device_type)
    basics_1d(mesh)
    random_1d(mesh)
    tp_mlp_and_attention(mesh)
    tp_sequence_parallel_block(mesh)
    tp_transformer_loss_parallel(mesh)
elif MODE == "2d":
    fsdp_tp_2d(mesh_2d())
else:
    raise SystemExit(f"unknown mode {MODE}")

finish()
