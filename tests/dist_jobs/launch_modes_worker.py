"""One rank of a job started in a given way (argv[1]); checks that CPU and
neuron collectives work and that the backend is the expected one."""

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

mode = sys.argv[1]


def check(rank, world):
    dev = torch.device("neuron", rank)
    t = torch.full((4,), float(rank + 1), device=dev)
    dist.all_reduce(t)
    assert t.cpu().tolist() == [world * (world + 1) / 2] * 4, t.cpu()
    if mode in ("default", "pair"):
        c = torch.full((4,), float(rank + 1))
        dist.all_reduce(c)  # gloo, for CPU tensors
        assert c.tolist() == [world * (world + 1) / 2] * 4
    dist.barrier()
    # One write: ranks started by torchrun share a stdout (unbuffered here).
    sys.stdout.write(f"BACKEND {dist.get_backend()}\n")
    sys.stdout.flush()
    dist.destroy_process_group()


def main(rank, world, init):
    torch.neuron.set_device(rank)
    init(rank, world)
    check(rank, world)


if mode == "spawn":

    def worker(rank, world, path):
        main(
            rank,
            world,
            lambda r, w: dist.init_process_group(
                "neuron", store=dist.FileStore(path, w), rank=r, world_size=w
            ),
        )

    if __name__ == "__main__":
        import tempfile

        import torch.multiprocessing as mp

        with tempfile.TemporaryDirectory() as d:
            mp.spawn(worker, args=(2, os.path.join(d, "store")), nprocs=2, join=True)
        print("SPAWN OK")
    sys.exit(0)

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
if mode == "default":
    main(rank, world, lambda r, w: dist.init_process_group())
elif mode == "pair":
    main(rank, world, lambda r, w: dist.init_process_group("cpu:gloo,neuron:neuron"))
elif mode == "neuron":
    main(rank, world, lambda r, w: dist.init_process_group("neuron"))
elif mode == "tcpstore":
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world,
        is_master=rank == 0,
        timeout=timedelta(seconds=60),
    )
    main(
        rank,
        world,
        lambda r, w: dist.init_process_group("neuron", store=store, rank=r, world_size=w),
    )
