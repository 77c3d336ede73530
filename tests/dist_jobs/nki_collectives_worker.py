"""One rank of the NKI collectives job: a kernel with an all-reduce and an
all-gather run as this process's rank (nki.collectives.run_distributed),
checked against the ranks' inputs."""

import nki
import nki.collectives as ncc
import nki.isa as nisa
import nki.language as nl
import torch
from common import dev, expect, expect_close, finish, rank, setup, world


@nki.jit
def reduce_and_gather(x, group, n):
    H, W = x.shape
    src = nl.ndarray((H, W), dtype=x.dtype, buffer=nl.shared_hbm)
    summed = nl.ndarray((H, W), dtype=x.dtype, buffer=nl.shared_hbm)
    gathered = nl.ndarray((H * n, W), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    ncc.all_reduce(srcs=[src], dsts=[summed], replica_group=group, op=nl.add)
    ncc.all_gather(srcs=[src], dsts=[gathered], replica_group=group, collective_dim=0)
    out_sum = nl.ndarray((H, W), dtype=x.dtype, buffer=nl.shared_hbm)
    out_all = nl.ndarray((H * n, W), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out_sum, src=summed)
    nisa.dma_copy(dst=out_all, src=gathered)
    return out_sum, out_all, ncc.rank_id()


setup()
xs = [torch.full((16, 8), float(r + 1)) for r in range(world)]
group = ncc.ReplicaGroup([list(range(world))])
out_sum, out_all, rid = ncc.run_distributed(reduce_and_gather[2], xs[rank].to(dev), group, world)
expect("device", out_sum.device.type == "neuron", out_sum.device)
expect("rank_id", rid == rank, rid)
expect_close("all_reduce", out_sum.cpu(), sum(xs))
expect_close("all_gather", out_all.cpu(), torch.cat(xs))
finish()
