"""One rank of the collectives test job: every collective, checked against the
result computed locally from every rank's (deterministic) inputs.

Prints one line per check that failed and ``DONE <n> checks`` at the end; exits
non-zero on the first unexpected exception.
"""

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
local = int(os.environ["LOCAL_RANK"])
torch.neuron.set_device(local)
dev = torch.device("neuron", local)
dist.init_process_group("neuron", timeout=timedelta(seconds=60))
assert dist.get_backend() == "neuron", dist.get_backend()
# How the data moves (shared memory on one host; gloo, or shared memory within
# hosts and gloo between them, across hosts): the tests check the choice.
_backend = dist.group.WORLD._get_backend(dev)
_backend = getattr(_backend, "wrapped_pg", _backend)  # TORCH_DISTRIBUTED_DEBUG=DETAIL wraps it
print("TRANSPORT", _backend.transport, flush=True)

failures = []
checks = 0


def expect(name, got, want, exact=True):
    global checks
    checks += 1
    got = got.cpu() if isinstance(got, torch.Tensor) else got
    try:
        if isinstance(want, torch.Tensor):
            if exact:
                torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
            else:
                torch.testing.assert_close(got, want, equal_nan=True)
        else:
            assert got == want, (got, want)
    except AssertionError as e:
        failures.append(f"{name}: {str(e)[:300]}")


def inp(r, n, dtype):
    """Rank r's input: small values, so products and sums are exact."""
    base = torch.arange(n, dtype=torch.float64) % 3 + r + 1
    if dtype == torch.bool:
        return (torch.arange(n) + r) % 2 == 0
    return base.to(dtype)


FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
ALL = FLOATS + INTS + [torch.bool]
R = dist.ReduceOp


def int_avg_ref(xs, dtype):
    """NCCL's integer average: the sum wraps in the dtype, then a C division
    (truncating toward zero) by the world size."""
    wrapped = torch.stack([x.to(torch.int64) for x in xs]).sum(0).to(dtype)
    return torch.div(wrapped, world, rounding_mode="trunc")


def reduce_ref(op, dtype, n):
    xs = [inp(r, n, dtype) for r in range(world)]
    if dtype == torch.bool:
        if op == R.SUM or op == R.MAX or op == R.BOR:
            return torch.stack(xs).any(0)
        if op == R.PRODUCT or op == R.MIN or op == R.BAND:
            return torch.stack(xs).all(0)
        if op == R.BXOR:
            out = xs[0]
            for x in xs[1:]:
                out = out ^ x
            return out
    acc = torch.stack(
        [x.to(torch.float64) if dtype.is_floating_point else x.to(torch.int64) for x in xs]
    )
    if op == R.SUM:
        out = acc.sum(0)
    elif op == R.PRODUCT:
        out = acc.prod(0)
    elif op == R.MIN:
        out = acc.min(0).values
    elif op == R.MAX:
        out = acc.max(0).values
    elif op == R.AVG and dtype.is_floating_point:
        out = acc.sum(0) / world
    elif op == R.AVG:
        return int_avg_ref(xs, dtype)
    elif op == R.BAND:
        out = acc[0]
        for x in acc[1:]:
            out = out & x
    elif op == R.BOR:
        out = acc[0]
        for x in acc[1:]:
            out = out | x
    elif op == R.BXOR:
        out = acc[0]
        for x in acc[1:]:
            out = out ^ x
    return out.to(dtype)


# ---- all_reduce: every op on every dtype it takes
for dtype in ALL:
    ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX]
    if dtype != torch.bool:
        ops.append(R.AVG)
    if not dtype.is_floating_point:
        ops += [R.BAND, R.BOR, R.BXOR]
    for op in ops:
        for n in (1, 1000, 70000):
            t = inp(rank, n, dtype).to(dev)
            dist.all_reduce(t, op=op)
            expect(
                f"all_reduce {op} {dtype} n={n}",
                t,
                reduce_ref(op, dtype, n),
                exact=not dtype.is_floating_point or dtype == torch.float64,
            )

# PREMUL_SUM with a double and a tensor factor
for factor in (0.5, torch.tensor(0.25, device=dev)):
    t = inp(rank, 100, torch.float32).to(dev)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor))
    f = factor if isinstance(factor, float) else 0.25
    expect(
        f"all_reduce premul_sum {type(factor).__name__}",
        t,
        reduce_ref(R.SUM, torch.float32, 100) * f,
        exact=False,
    )

# Non-contiguous input, written in place
base = torch.stack([inp(rank, 8, torch.float32)] * 3, 1).to(dev)  # (8, 3)
col = base[:, 1]
assert not col.is_contiguous()
dist.all_reduce(col)
expect("all_reduce non-contiguous", base[:, 1], reduce_ref(R.SUM, torch.float32, 8))
expect("all_reduce non-contiguous leaves neighbours", base[:, 0], inp(rank, 8, torch.float32))

# async_op: wait, is_completed, future, result
t = inp(rank, 1000, torch.float32).to(dev)
work = dist.all_reduce(t, async_op=True)
work.wait()
y = t * 2  # ordered after the collective on the current stream
expect("async all_reduce then compute", y, reduce_ref(R.SUM, torch.float32, 1000) * 2)
fut = dist.all_reduce(inp(rank, 10, torch.float32).to(dev), async_op=True).get_future()
val = fut.then(lambda f: f.value()[0] + 1).wait()
expect("future then", val, reduce_ref(R.SUM, torch.float32, 10) + 1)
torch.neuron.synchronize()
expect("work is_completed after sync", work.is_completed(), True)

# ---- broadcast, reduce
for dtype in ALL:
    root = world - 1
    t = inp(rank, 33, dtype).to(dev)
    dist.broadcast(t, src=root)
    expect(f"broadcast {dtype}", t, inp(root, 33, dtype))
    t = inp(rank, 33, dtype).to(dev)
    dist.reduce(t, dst=0, op=R.MAX)
    if rank == 0:
        expect(f"reduce {dtype}", t, reduce_ref(R.MAX, dtype, 33))

# ---- gathers and scatters
for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
    x = inp(rank, 6, dtype).to(dev)
    outs = [torch.empty(6, dtype=dtype, device=dev) for _ in range(world)]
    dist.all_gather(outs, x)
    for r in range(world):
        expect(f"all_gather {dtype} [{r}]", outs[r], inp(r, 6, dtype))
    big = torch.empty(world * 6, dtype=dtype, device=dev)
    dist.all_gather_into_tensor(big, x)
    expect(
        f"all_gather_into_tensor {dtype}", big, torch.cat([inp(r, 6, dtype) for r in range(world)])
    )

x = torch.arange(world * 4, dtype=torch.float32, device=dev) + rank
out = torch.empty(4, device=dev)
dist.reduce_scatter_tensor(out, x)
ref = sum(torch.arange(world * 4, dtype=torch.float32) + r for r in range(world))
expect("reduce_scatter_tensor", out, ref[rank * 4 : (rank + 1) * 4])
ins = list((torch.arange(world * 4, dtype=torch.float32, device=dev) + rank).chunk(world))
out = torch.empty(4, device=dev)
dist.reduce_scatter(out, ins, op=R.MAX)
expect(
    "reduce_scatter list",
    out,
    (torch.arange(world * 4, dtype=torch.float32) + world - 1)[rank * 4 : (rank + 1) * 4],
)


# ---- AVG on integers, as NCCL: negative sums truncate toward zero, and the
# sum wraps in the dtype before the division (uint8/int8 inputs near the top
# of their range). all_reduce (small and chunked sizes), reduce_scatter_tensor
# and the list form.
def avg_inp(r, n, dtype):
    k = torch.arange(n, dtype=torch.int64)
    if dtype == torch.uint8:
        return ((k * 37 + 200 + r * 29) % 256).to(dtype)
    if dtype == torch.int8:
        return ((k * 37 + 100 + r * 53) % 256 - 128).to(dtype)
    return (k % 11 - 7 - 3 * r + (k % 5) * r).to(dtype)  # negative and positive sums


for dtype in INTS:
    for n in (7, 70000):
        xs = [avg_inp(r, n, dtype) for r in range(world)]
        t = xs[rank].to(dev)
        dist.all_reduce(t, op=R.AVG)
        expect(f"all_reduce AVG {dtype} n={n} (integer)", t, int_avg_ref(xs, dtype))
    xs = [avg_inp(r, world * 5, dtype) for r in range(world)]
    want = int_avg_ref(xs, dtype).chunk(world)[rank]
    out = torch.empty(5, dtype=dtype, device=dev)
    dist.reduce_scatter_tensor(out, xs[rank].to(dev), op=R.AVG)
    expect(f"reduce_scatter_tensor AVG {dtype} (integer)", out, want)
    out = torch.empty(5, dtype=dtype, device=dev)
    dist.reduce_scatter(out, list(xs[rank].to(dev).chunk(world)), op=R.AVG)
    expect(f"reduce_scatter AVG {dtype} (integer)", out, want)
    t = xs[rank].to(dev)
    dist.reduce(t, dst=0, op=R.AVG)
    if rank == 0:
        expect(f"reduce AVG {dtype} (integer)", t, int_avg_ref(xs, dtype))

objs = [None] * world
dist.all_gather_object(objs, {"rank": rank, "s": "x" * rank})
expect("all_gather_object", objs, [{"rank": r, "s": "x" * r} for r in range(world)])
lst = [rank, "hello"] if rank == 0 else [None, None]
dist.broadcast_object_list(lst, src=0)
expect("broadcast_object_list", lst, [0, "hello"])

g = [torch.empty(3, device=dev) for _ in range(world)] if rank == 0 else None
dist.gather(torch.full((3,), float(rank), device=dev), g, dst=0)
if rank == 0:
    for r in range(world):
        expect(f"gather [{r}]", g[r], torch.full((3,), float(r)))
s = (
    [torch.full((2,), float(r * 10), device=dev) for r in range(world)]
    if rank == 1 % world
    else None
)
o = torch.empty(2, device=dev)
dist.scatter(o, s, src=1 % world)
expect("scatter", o, torch.full((2,), float(rank * 10)))

# ---- all_to_all: even, uneven (rank r sends r+k+1 rows to rank k), lists
x = torch.arange(world * 2, dtype=torch.float32, device=dev) + 100 * rank
o = torch.empty(world * 2, device=dev)
dist.all_to_all_single(o, x)
expect(
    "all_to_all_single even",
    o,
    torch.cat(
        [torch.arange(rank * 2, rank * 2 + 2, dtype=torch.float32) + 100 * r for r in range(world)]
    ),
)


def rows(src, dst):
    return src + dst + 1


in_splits = [rows(rank, k) for k in range(world)]
out_splits = [rows(k, rank) for k in range(world)]
x = torch.cat([torch.full((rows(rank, k), 2), float(rank * 10 + k)) for k in range(world)]).to(dev)
o = torch.empty(sum(out_splits), 2, device=dev)
dist.all_to_all_single(o, x, out_splits, in_splits)
expect(
    "all_to_all_single uneven",
    o,
    torch.cat([torch.full((rows(k, rank), 2), float(k * 10 + rank)) for k in range(world)]),
)
ins = [torch.full((k + 1,), float(rank), device=dev) for k in range(world)]
outs = [torch.empty(rank + 1, device=dev) for _ in range(world)]
dist.all_to_all(outs, ins)
for k in range(world):
    expect(f"all_to_all list [{k}]", outs[k], torch.full((rank + 1,), float(k)))

# ---- point to point: a ring, blocking and batched (large, both ways)
if world > 1:
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    if rank % 2 == 0:
        dist.send(torch.full((5,), float(rank), device=dev), nxt)
        r = torch.empty(5, device=dev)
        dist.recv(r, prv)
    else:
        r = torch.empty(5, device=dev)
        dist.recv(r, prv)
        dist.send(torch.full((5,), float(rank), device=dev), nxt)
    expect("send/recv ring", r, torch.full((5,), float(prv)))
    n = 1 << 20  # 4 MiB each way: larger than a mailbox
    send_t = torch.full((n,), float(rank), device=dev)
    recv_t = torch.empty(n, device=dev)
    reqs = dist.batch_isend_irecv(
        [dist.P2POp(dist.isend, send_t, nxt), dist.P2POp(dist.irecv, recv_t, prv)]
    )
    for q in reqs:
        q.wait()
    expect("batch_isend_irecv ring 4 MiB", recv_t[:: n // 8], torch.full((8,), float(prv)))

# ---- sub-groups
sub = dist.new_group([0, world - 1]) if world > 1 else dist.group.WORLD
if rank in (0, world - 1):
    t = torch.full((4,), float(rank + 1), device=dev)
    dist.all_reduce(t, group=sub)
    expect(
        "new_group all_reduce",
        t,
        torch.full((4,), float(1 + world)) if world > 1 else torch.full((4,), 1.0),
    )

dist.barrier()
torch.neuron.synchronize()
for f in failures:
    print("FAIL", f)
print(f"DONE {checks} checks, {len(failures)} failed")
dist.destroy_process_group()
sys.exit(1 if failures else 0)
