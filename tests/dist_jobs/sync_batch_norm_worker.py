"""One rank of the SyncBatchNorm job: a conv net whose BatchNorms are converted with
``SyncBatchNorm.convert_sync_batchnorm``, wrapped in DDP on neuron, trained a few
steps, compared with the single-process CPU run of the same global batch with plain
BatchNorm (what SyncBatchNorm computes: statistics over every rank's samples):
outputs, every parameter after each step, the running statistics, then an eval
forward. float32 and bfloat16; ranks with unequal batch sizes, and a rank with an
empty batch (it still takes part in the collectives).
"""

import copy

import torch
import torch.nn as nn
from common import dev, expect_close, finish, rank, setup, world
from torch.nn.parallel import DistributedDataParallel as DDP

setup()
STEPS = 3
LR = 0.1


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 6 * 6, 16)
        self.bn1d = nn.BatchNorm1d(16)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv(x)))
        h = torch.relu(self.bn1d(self.fc(h.flatten(1))))
        return self.head(h)


def batch(step, sizes):
    g = torch.Generator().manual_seed(100 + step)
    n = sum(sizes)
    return torch.randn(n, 3, 6, 6, generator=g), torch.randn(n, 4, generator=g)


def local(t, sizes):
    start = sum(sizes[:rank])
    return t[start : start + sizes[rank]]


def run(dtype, sizes, tol):
    name = f"{dtype}/{'-'.join(map(str, sizes))}"
    torch.manual_seed(0)
    ref = Net().to(dtype)
    model = nn.SyncBatchNorm.convert_sync_batchnorm(copy.deepcopy(ref)).to(dev)
    ddp = DDP(model, device_ids=None)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=LR)
    total = sum(sizes)
    for step in range(STEPS):
        x, y = (t.to(dtype) for t in batch(step, sizes))
        # The reference: the global batch at once; each rank's loss is its part of
        # the global mean, scaled by the world size (DDP averages the gradients).
        ref_opt.zero_grad()
        ref_out = ref(x)
        ((ref_out.float() - y.float()) ** 2).sum().div(total).backward()
        ref_opt.step()
        opt.zero_grad()
        out = ddp(local(x, sizes).to(dev))
        ((out.float() - local(y, sizes).to(dev).float()) ** 2).sum().div(total).mul(
            world
        ).backward()
        opt.step()
        if sizes[rank]:
            expect_close(f"{name} step {step} output", out, local(ref_out, sizes), **tol)
        for (n, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
            expect_close(f"{name} step {step} {n}", p, q, **tol)
    for n in ("bn", "bn1d"):
        got, want = getattr(model, n), getattr(ref, n)
        expect_close(f"{name} {n}.running_mean", got.running_mean, want.running_mean, **tol)
        expect_close(f"{name} {n}.running_var", got.running_var, want.running_var, **tol)
        expect_close(
            f"{name} {n}.num_batches_tracked", got.num_batches_tracked, want.num_batches_tracked
        )
    model.eval()
    ref.eval()
    x, _ = batch(99, [4] * world)
    with torch.no_grad():
        expect_close(f"{name} eval", model(x.to(dtype).to(dev)), ref(x.to(dtype)), **tol)


run(torch.float32, [4] * world, {"rtol": 1e-4, "atol": 1e-5})
run(torch.float32, [3, 5, 2, 6][:world], {"rtol": 1e-4, "atol": 1e-5})
run(torch.float32, [0, 6, 3, 3][:world], {"rtol": 1e-4, "atol": 1e-5})
run(torch.bfloat16, [4] * world, {"rtol": 4e-2, "atol": 4e-2})
finish()
