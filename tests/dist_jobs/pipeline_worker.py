"""One rank of the pipelining job (2 ranks, 2 stages): torch.distributed.pipelining
with the GPipe and 1F1B schedules on a small transformer split in two, trained for a
few steps; the per-step loss (mean over micro-batches) and the final parameters match
the single-process CPU run on the whole batch.
"""

import copy

import torch
import torch.nn as nn
from common import dev, expect, expect_close, finish, rank, setup, world
from models import TinyTransformer, lm_loss, tokens_for
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

setup()
assert world == 2
BATCH, MICRO, STEPS = 8, 4, 3


class First(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.embed, self.layer = m.embed, m.layers[0]

    def forward(self, tokens):
        return self.layer(self.embed(tokens))


class Last(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.layer, self.norm, self.head = m.layers[1], m.norm, m.head

    def forward(self, x):
        return self.head(self.norm(self.layer(x)))


def run(schedule_cls):
    name = schedule_cls.__name__
    torch.manual_seed(0)
    ref = TinyTransformer(vocab=32, dim=32, heads=4)
    full = copy.deepcopy(ref)
    part = (First if rank == 0 else Last)(full).to(dev)
    stage = PipelineStage(part, rank, world, dev)
    schedule = schedule_cls(stage, n_microbatches=MICRO, loss_fn=lm_loss)
    opt = torch.optim.SGD(part.parameters(), lr=0.2, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.2, momentum=0.9)
    for step in range(STEPS):
        tokens = tokens_for(step, BATCH, seq=8, vocab=32)
        opt.zero_grad()
        if rank == 0:
            schedule.step(tokens.to(dev))
        else:
            losses = []
            out = schedule.step(target=tokens.to(dev), losses=losses)
            expect(f"{name} step {step}: one loss per micro-batch", len(losses) == MICRO)
        opt.step()
        ref_opt.zero_grad()
        logits = ref(tokens)
        want = lm_loss(logits, tokens)
        want.backward()
        ref_opt.step()
        if rank == 1:
            # Equal micro-batches: the mean of their losses is the batch's loss.
            expect_close(f"{name} step {step}: loss", torch.stack(losses).mean(), want)
            expect_close(f"{name} step {step}: output", out, logits, atol=1e-4)
    ref_part = (First if rank == 0 else Last)(ref)
    for (n, p), q in zip(part.named_parameters(), ref_part.parameters(), strict=True):
        expect_close(f"{name} after {STEPS} steps: {n}", p, q, rtol=1e-4, atol=1e-5)


for cls in (ScheduleGPipe, Schedule1F1B):
    run(cls)

finish()
