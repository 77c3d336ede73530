"""One rank of the DDP job: DistributedDataParallel on neuron, trained for a few steps
in several configurations, each compared with the single-process CPU run of the same
global batch (the same initial parameters, every rank's slice of the batch at once).

Configurations: several small gradient buckets; find_unused_parameters with a
parameter that is never used and one used every other step; static_graph; no_sync()
gradient accumulation; gradient_as_bucket_view; the bf16 and fp16 compression hooks
(whose reference emulates the compression: every rank's local gradient, rounded,
divided by the world size, summed, rounded).
"""

import copy
import time
import warnings

import torch
import torch.nn as nn
from common import dev, expect, expect_close, finish, rank, setup, world
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

warnings.filterwarnings("ignore", message="Time stats are currently only collected")
setup()

PER_RANK = 4
STEPS = 4
LR = 0.05


class Net(nn.Module):
    def __init__(self, extra=False):
        super().__init__()
        self.fc1 = nn.Linear(24, 64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 48)
        self.head = nn.Linear(48, 6)
        if extra:
            self.aux = nn.Linear(48, 6)  # used on even steps only
            self.unused = nn.Linear(48, 6)  # never used

    def forward(self, x, use_aux=False):
        h = torch.tanh(self.fc1(x))
        h = torch.relu(self.fc2(h)) + h
        h = torch.tanh(self.fc3(h))
        out = self.head(h)
        if use_aux:
            out = out + 0.5 * self.aux(h)
        return out


def batch(step, micro=0):
    g = torch.Generator().manual_seed(1000 * step + micro)
    x = torch.randn(PER_RANK * world, 24, generator=g)
    y = torch.randn(PER_RANK * world, 6, generator=g)
    return x, y


def local(t):
    return t[rank * PER_RANK : (rank + 1) * PER_RANK]


def loss_fn(out, y):
    return ((out - y) ** 2).mean()


def ref_grads(model, x, y, use_aux, compress=None):
    """The gradients DDP should produce, on CPU: the full batch's, or the
    compressed average of every rank's local gradients."""
    model.zero_grad(set_to_none=True)
    if compress is None:
        loss_fn(model(x, use_aux), y).backward()
        return {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}
    per_rank = []
    for r in range(world):
        model.zero_grad(set_to_none=True)
        sl = slice(r * PER_RANK, (r + 1) * PER_RANK)
        loss_fn(model(x[sl], use_aux), y[sl]).backward()
        per_rank.append({n: p.grad for n, p in model.named_parameters()})
    out = {}
    for n, _ in model.named_parameters():
        gs = [g[n] for g in per_rank]
        if gs[0] is None:
            out[n] = None
            continue
        summed = sum((g.to(compress) / world).float() for g in gs)
        out[n] = summed.to(compress).float()
    return out


def run(
    name, ddp_kwargs, hook=None, compress=None, aux_every_other=False, accumulate=1, extra=False
):
    t0 = time.monotonic()
    torch.manual_seed(0)
    ref = Net(extra)
    model = copy.deepcopy(ref)
    if rank != 0:  # DDP must broadcast rank 0's parameters at construction
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0 + rank)
    model = model.to(dev)
    ddp = DDP(model, device_ids=[dev.index], **ddp_kwargs)
    if hook is not None:
        ddp.register_comm_hook(None, hook)
    for (n, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        expect_close(f"{name}: parameters broadcast from rank 0 ({n})", p, q, rtol=0, atol=0)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=LR, momentum=0.9)
    for step in range(STEPS):
        use_aux = aux_every_other and step % 2 == 0
        opt.zero_grad(set_to_none=True)
        want = None
        for micro in range(accumulate):
            x, y = batch(step, micro)
            g = ref_grads(ref, x, y, use_aux, compress)
            want = (
                g if want is None else {n: None if v is None else v + want[n] for n, v in g.items()}
            )
            last = micro == accumulate - 1
            ctx = ddp.no_sync() if not last else _null()
            with ctx:
                out = ddp(local(x).to(dev), use_aux)
                loss_fn(out, local(y).to(dev)).backward()
            if not last:
                # Under no_sync the gradients stay local: this rank's own slices so far.
                r0 = copy.deepcopy(ref)
                r0.zero_grad(set_to_none=True)
                for m in range(micro + 1):
                    xm, ym = batch(step, m)
                    loss_fn(r0(local(xm), use_aux), local(ym)).backward()
                for (n, p), q in zip(model.named_parameters(), r0.parameters(), strict=True):
                    if q.grad is not None:
                        expect_close(f"{name}: step {step} no_sync local grad {n}", p.grad, q.grad)
        for n, p in model.named_parameters():
            w = want[n]
            if w is None:
                expect(f"{name}: step {step} {n} has no gradient", p.grad is None, p.grad)
                continue
            tol = dict(rtol=1e-5, atol=1e-6) if compress is None else dict(rtol=1e-2, atol=1e-5)
            expect_close(f"{name}: step {step} grad {n}", p.grad, w, **tol)
            if compress is not None:
                g = p.grad.detach().cpu()
                expect(
                    f"{name}: step {step} grad {n} went through {compress}",
                    torch.equal(g.to(compress).float(), g),
                )
        for n, p in ref.named_parameters():
            p.grad = want[n]
        opt.step()
        ref_opt.step()
    atol = 1e-5 if compress is None else 2e-4
    for (n, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        expect_close(f"{name}: parameters after {STEPS} steps ({n})", p, q, rtol=1e-4, atol=atol)
    print(f"{name}: {time.monotonic() - t0:.1f} s", flush=True)
    return ddp


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


SMALL = 0.005  # MiB: about 5 KB per bucket, so the model makes several
d = run("buckets", dict(bucket_cap_mb=SMALL))
data = d._get_ddp_logging_data()
n_buckets = len(data["rebuilt_bucket_sizes"].split(","))
expect("buckets: several buckets", n_buckets >= 3, data["rebuilt_bucket_sizes"])
run(
    "find_unused",
    dict(bucket_cap_mb=SMALL, find_unused_parameters=True),
    aux_every_other=True,
    extra=True,
)
# A parameter that is never used is fine with a static graph.
run("static_graph", dict(static_graph=True), extra=True)
run("no_sync", dict(bucket_cap_mb=SMALL), accumulate=3)
d = run("bucket_view", dict(bucket_cap_mb=SMALL, gradient_as_bucket_view=True))
run("bf16_hook", dict(bucket_cap_mb=SMALL), default_hooks.bf16_compress_hook, torch.bfloat16)
run("fp16_hook", dict(), default_hooks.fp16_compress_hook, torch.float16)

finish()
