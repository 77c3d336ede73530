"""One rank of the distributed-checkpoint job: torch.distributed.checkpoint with an
FSDP2-sharded model and its optimizer, resharded on load.

``save DIR`` (any world size): trains the sharded model two steps, saves the sharded
model + optimizer state dict with dcp.save, and (rank 0) the full state dicts with
torch.save as the reference.
``load DIR`` (any other world size): shards a differently initialised model over this
world, loads the checkpoint with dcp.load + set_state_dict, and compares every
parameter and momentum buffer with the reference; then one more step matches the CPU
step from the reference state.
"""

import os
import sys

import torch
import torch.distributed.checkpoint as dcp
from common import dev, expect, expect_close, finish, rank, setup, world
from models import TinyTransformer, lm_loss, tokens_for
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

MODE, DIR = sys.argv[1], sys.argv[2]
setup()
mesh = init_device_mesh("neuron", (world,))
PER_RANK = 8 // world  # the same global batch of 8 at every world size


def sharded_model(seed):
    torch.manual_seed(seed)
    model = TinyTransformer(vocab=32, dim=32, heads=4)
    for block in model.layers:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def step(model, opt, n):
    tokens = tokens_for(100 + n, 8, seq=8, vocab=32)
    mine = tokens[rank * PER_RANK : (rank + 1) * PER_RANK].to(dev)
    opt.zero_grad()
    lm_loss(model(mine), mine).backward()
    opt.step()


def make_opt(params):
    return torch.optim.SGD(params, lr=0.2, momentum=0.9)


if MODE == "save":
    model = sharded_model(0)
    opt = make_opt(model.parameters())
    for n in range(2):
        step(model, opt, n)
    msd, osd = get_state_dict(model, opt)
    expect("saved model state is sharded", all(isinstance(v, DTensor) for v in msd.values()))
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=os.path.join(DIR, "ckpt"))
    full = StateDictOptions(full_state_dict=True, cpu_offload=True)
    fmsd, fosd = get_state_dict(model, opt, options=full)
    if rank == 0:
        torch.save({"model": fmsd, "optim": fosd}, os.path.join(DIR, "reference.pt"))
elif MODE == "load":
    ref = torch.load(os.path.join(DIR, "reference.pt"))
    model = sharded_model(1)  # other initial values: everything must come from the file
    opt = make_opt(model.parameters())
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=os.path.join(DIR, "ckpt"))
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    for n, p in model.named_parameters():
        expect(
            f"{n} sharded over {world}",
            isinstance(p, DTensor) and p.device_mesh.size() == world,
        )
        expect_close(f"loaded {n}", p, ref["model"][n], rtol=0, atol=0)
    full = StateDictOptions(full_state_dict=True, cpu_offload=True)
    _, fosd = get_state_dict(model, opt, options=full)  # on rank 0 only (cpu_offload)
    for n, s in ref["optim"]["state"].items() if rank == 0 else ():
        expect_close(
            f"loaded momentum of {n}",
            fosd["state"][n]["momentum_buffer"],
            s["momentum_buffer"],
            rtol=0,
            atol=0,
        )
    # One more step from the loaded state matches the CPU step from the reference.
    step(model, opt, 2)
    cpu = TinyTransformer(vocab=32, dim=32, heads=4)
    cpu.load_state_dict(ref["model"])
    cpu_opt = make_opt(cpu.parameters())
    names = [n for n, _ in cpu.named_parameters()]
    cpu_opt.load_state_dict(
        {
            "state": {
                i: {"momentum_buffer": ref["optim"]["state"][n]["momentum_buffer"]}
                for i, n in enumerate(names)
            },
            "param_groups": [
                {**ref["optim"]["param_groups"][0], "params": list(range(len(names)))}
            ],
        }
    )
    tokens = tokens_for(102, 8, seq=8, vocab=32)
    cpu_opt.zero_grad()
    lm_loss(cpu(tokens), tokens).backward()
    cpu_opt.step()
    for (n, p), q in zip(model.named_parameters(), cpu.parameters(), strict=True):
        expect_close(f"step after loading: {n}", p, q, rtol=1e-4, atol=1e-5)
else:
    raise SystemExit(f"unknown mode {MODE}")

finish()
