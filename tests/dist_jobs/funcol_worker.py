"""One rank of the functional-collectives job: torch.distributed._functional_collectives
and the torch.ops._c10d_functional ops, eager, on neuron tensors, each checked
against the value computed locally (on CPU) from every rank's deterministic input.
"""

import warnings

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from common import dev, expect, expect_close, finish, rank, setup, world

# The tensor-suffixed names are deprecated aliases of the *_single ones: both are tested.
warnings.filterwarnings("ignore", category=FutureWarning)
setup()
c10d = torch.ops._c10d_functional
WORLD = dist.group.WORLD
NAME = WORLD.group_name


def inp(r, shape, dtype=torch.float32):
    """Rank r's input: small integers, so sums are exact in every float dtype."""
    n = 1
    for s in shape:
        n *= s
    return ((torch.arange(n, dtype=torch.float64) % 7) + 3 * r + 1).reshape(shape).to(dtype)


def on_dev(r, shape, dtype=torch.float32):
    # Produced by compute on the current stream right before the collective.
    return (inp(r, shape, dtype).to(dev) + 1) - 1


def everyone(shape, dtype=torch.float32):
    return [inp(r, shape, dtype) for r in range(world)]


# ---- funcol.all_reduce: every reduce op name, several dtypes
for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int64):
    xs = torch.stack(everyone((5, 3), dtype)).to(torch.float64)
    refs = {"sum": xs.sum(0), "max": xs.max(0).values, "min": xs.min(0).values}
    if dtype.is_floating_point:
        refs["avg"] = xs.mean(0)
    else:  # NCCL's integer average: the sum, divided truncating toward zero
        refs["avg"] = torch.div(xs.sum(0), world, rounding_mode="trunc")
    for op, want in refs.items():
        y = funcol.all_reduce(on_dev(rank, (5, 3), dtype), op, WORLD)
        expect(f"all_reduce {op} {dtype} is async", isinstance(y, funcol.AsyncCollectiveTensor))
        expect_close(f"all_reduce {op} {dtype}", y, want.to(dtype))

# group given as a list of ranks, and as a group name
x = on_dev(rank, (16,))
want = torch.stack(everyone((16,))).sum(0)
expect_close("all_reduce group=list", funcol.all_reduce(x, "sum", list(range(world))), want)
expect_close("all_reduce group=name", funcol.all_reduce(x, "sum", NAME), want)
# input untouched (functional)
expect_close("all_reduce leaves its input", x, inp(rank, (16,)))

# ---- all_gather_tensor on dim 0 and 1 (dim 1 is a non-contiguous chunk-and-cat)
for dim in (0, 1):
    y = funcol.all_gather_tensor(on_dev(rank, (3, 4)), dim, WORLD)
    expect_close(f"all_gather_tensor dim={dim}", y, torch.cat(everyone((3, 4)), dim))
y = funcol.all_gather_tensor(on_dev(rank, (3, 4), torch.bfloat16), 0, WORLD)
expect_close("all_gather_tensor bf16", y, torch.cat(everyone((3, 4), torch.bfloat16)))

# ---- reduce_scatter_tensor on dim 0 and 1
for dim in (0, 1):
    shape = (world * 2, 3) if dim == 0 else (3, world * 2)
    y = funcol.reduce_scatter_tensor(on_dev(rank, shape), "sum", dim, WORLD)
    full = torch.stack(everyone(shape)).sum(0)
    expect_close(f"reduce_scatter_tensor dim={dim}", y, full.chunk(world, dim)[rank])
y = funcol.reduce_scatter_tensor(on_dev(rank, (world * 4,)), "avg", 0, WORLD)
expect_close(
    "reduce_scatter_tensor avg",
    y,
    torch.stack(everyone((world * 4,))).mean(0).chunk(world)[rank],
)

# ---- all_to_all_single: even, and uneven (rank r sends r + k + 1 rows to rank k)
x = on_dev(rank, (world * 2, 3))
y = funcol.all_to_all_single(x, None, None, WORLD)
expect_close(
    "all_to_all_single even",
    y,
    torch.cat([inp(k, (world * 2, 3)).chunk(world)[rank] for k in range(world)]),
)


def rows(src, dst):
    return src + dst + 1


def uneven_input(r):
    return torch.cat([torch.full((rows(r, k), 2), float(r * 10 + k)) for k in range(world)])


in_splits = [rows(rank, k) for k in range(world)]
out_splits = [rows(k, rank) for k in range(world)]
y = funcol.all_to_all_single(uneven_input(rank).to(dev), out_splits, in_splits, WORLD)
want = torch.cat([torch.full((rows(k, rank), 2), float(k * 10 + rank)) for k in range(world)])
expect_close("all_to_all_single uneven", y, want)
expect("all_to_all_single uneven shape", tuple(y.shape) == tuple(want.shape), y.shape)
# a rank that sends nothing to one peer
in_splits = [0 if k == (rank + 1) % world else 2 for k in range(world)]
out_splits = [0 if rank == (k + 1) % world else 2 for k in range(world)]
x = torch.cat([torch.full((in_splits[k],), float(rank * 10 + k)) for k in range(world)]).to(dev)
y = funcol.all_to_all_single(x, out_splits, in_splits, WORLD)
want = torch.cat([torch.full((out_splits[k],), float(k * 10 + rank)) for k in range(world)])
expect_close("all_to_all_single with an empty split", y, want)

# ---- broadcast
y = funcol.broadcast(on_dev(rank, (6,)), world - 1, WORLD)
expect_close("broadcast", y, inp(world - 1, (6,)))

# ---- coalesced forms
xs = [on_dev(rank, (4,)), on_dev(rank, (2, 3)), on_dev(rank, (world * 2,))]
ys = funcol.all_reduce_coalesced(xs, "sum", WORLD)
for i, (y, shape) in enumerate(zip(ys, [(4,), (2, 3), (world * 2,)], strict=True)):
    expect_close(f"all_reduce_coalesced [{i}]", y, torch.stack(everyone(shape)).sum(0))
ys = funcol.all_gather_into_tensor_coalesced([on_dev(rank, (3,)), on_dev(rank, (2, 2))], WORLD)
expect_close("all_gather_into_tensor_coalesced [0]", ys[0], torch.cat(everyone((3,))))
expect_close("all_gather_into_tensor_coalesced [1]", ys[1], torch.cat(everyone((2, 2))))
shapes = [(world * 3,), (world, 2)]
ys = funcol.reduce_scatter_tensor_coalesced([on_dev(rank, s) for s in shapes], "sum", [0, 0], WORLD)
for i, (y, s) in enumerate(zip(ys, shapes, strict=True)):
    expect_close(
        f"reduce_scatter_tensor_coalesced [{i}]",
        y,
        torch.stack(everyone(s)).sum(0).chunk(world)[rank],
    )

# ---- several in flight, compute in between, then wait_tensor
a = funcol.all_reduce(on_dev(rank, (1000,)), "sum", WORLD)
b = funcol.all_gather_tensor(on_dev(rank, (1000,)), 0, WORLD)
busy = torch.randn(256, 256, device=dev)
for _ in range(5):
    busy = busy @ busy / 16
a = funcol.wait_tensor(a)
b = funcol.wait_tensor(b)
expect_close("in flight: all_reduce", a * 3, torch.stack(everyone((1000,))).sum(0) * 3)
expect_close("in flight: all_gather", b, torch.cat(everyone((1000,))))

# ---- torch.ops._c10d_functional, called directly
x = on_dev(rank, (8,))
out = c10d.wait_tensor(c10d.all_reduce(x, "sum", NAME))
expect_close("ops.all_reduce", out, torch.stack(everyone((8,))).sum(0))
expect_close("ops.all_reduce leaves its input", x, inp(rank, (8,)))
x = on_dev(rank, (8,))
r = c10d.all_reduce_(x, "max", NAME)
c10d.wait_tensor(x)
expect_close("ops.all_reduce_ (in place)", x, torch.stack(everyone((8,))).max(0).values)
expect("ops.all_reduce_ returns its input", r.data_ptr() == x.data_ptr())
out = c10d.wait_tensor(c10d.all_gather_into_tensor(on_dev(rank, (2, 3)), world, NAME))
expect_close("ops.all_gather_into_tensor", out, torch.cat(everyone((2, 3))))
dst = torch.empty(world * 2, 3, device=dev)
c10d.all_gather_into_tensor_out(on_dev(rank, (2, 3)), world, NAME, out=dst)
c10d.wait_tensor(dst)
expect_close("ops.all_gather_into_tensor_out", dst, torch.cat(everyone((2, 3))))
out = c10d.wait_tensor(c10d.reduce_scatter_tensor(on_dev(rank, (world * 3,)), "sum", world, NAME))
expect_close(
    "ops.reduce_scatter_tensor", out, torch.stack(everyone((world * 3,))).sum(0).chunk(world)[rank]
)
splits_in = [rows(rank, k) for k in range(world)]
splits_out = [rows(k, rank) for k in range(world)]
out = c10d.wait_tensor(
    c10d.all_to_all_single(uneven_input(rank).to(dev), splits_out, splits_in, NAME)
)
expect_close(
    "ops.all_to_all_single uneven",
    out,
    torch.cat([torch.full((rows(k, rank), 2), float(k * 10 + rank)) for k in range(world)]),
)
out = c10d.wait_tensor(c10d.broadcast(on_dev(rank, (5,)), 0, NAME))
expect_close("ops.broadcast", out, inp(0, (5,)))
x = on_dev(rank, (5,))
c10d.broadcast_(x, 0, NAME)
c10d.wait_tensor(x)
expect_close("ops.broadcast_", x, inp(0, (5,)))
outs = c10d.all_reduce_coalesced([on_dev(rank, (3,)), on_dev(rank, (4,))], "sum", NAME)
outs = [c10d.wait_tensor(o) for o in outs]
expect_close("ops.all_reduce_coalesced [0]", outs[0], torch.stack(everyone((3,))).sum(0))
expect_close("ops.all_reduce_coalesced [1]", outs[1], torch.stack(everyone((4,))).sum(0))
xs = [on_dev(rank, (3,)), on_dev(rank, (4,))]
c10d.all_reduce_coalesced_(xs, "sum", NAME)
for i, (x, n) in enumerate(zip(xs, (3, 4), strict=True)):
    c10d.wait_tensor(x)
    expect_close(f"ops.all_reduce_coalesced_ [{i}]", x, torch.stack(everyone((n,))).sum(0))
outs = c10d.all_gather_into_tensor_coalesced(
    [on_dev(rank, (3,)), on_dev(rank, (1, 2))], world, NAME
)
outs = [c10d.wait_tensor(o) for o in outs]
expect_close("ops.all_gather_into_tensor_coalesced [0]", outs[0], torch.cat(everyone((3,))))
expect_close("ops.all_gather_into_tensor_coalesced [1]", outs[1], torch.cat(everyone((1, 2))))
outs = c10d.reduce_scatter_tensor_coalesced(
    [on_dev(rank, (world * 2,)), on_dev(rank, (world, 3))], "sum", world, NAME
)
outs = [c10d.wait_tensor(o) for o in outs]
expect_close(
    "ops.reduce_scatter_tensor_coalesced [0]",
    outs[0],
    torch.stack(everyone((world * 2,))).sum(0).chunk(world)[rank],
)
expect_close(
    "ops.reduce_scatter_tensor_coalesced [1]",
    outs[1],
    torch.stack(everyone((world, 3))).sum(0).chunk(world)[rank],
)

# ---- autograd variants: all_gather's backward is a reduce-scatter and back
x = on_dev(rank, (2, 3)).requires_grad_()
y = funcol.all_gather_tensor_autograd(x, 0, WORLD)
y = funcol.wait_tensor(y)
weight = torch.arange(world * 6, dtype=torch.float32).reshape(world * 2, 3)
(y * weight.to(dev)).sum().backward()
expect_close("all_gather_tensor_autograd forward", y, torch.cat(everyone((2, 3))))
expect_close("all_gather_tensor_autograd backward", x.grad, (weight * world).chunk(world)[rank])
x = on_dev(rank, (world * 2,)).requires_grad_()
y = funcol.wait_tensor(funcol.reduce_scatter_tensor_autograd(x, "sum", 0, WORLD))
(y * (rank + 1)).sum().backward()
expect_close(
    "reduce_scatter_tensor_autograd backward",
    x.grad,
    torch.cat([torch.full((2,), float(r + 1)) for r in range(world)]),
)

# ---- a sub-group of two ranks (new_group) when there are more
if world > 2:
    sub = dist.new_group([0, world - 1])
    if rank in (0, world - 1):
        y = funcol.all_reduce(on_dev(rank, (4,)), "sum", sub)
        expect_close("all_reduce sub-group", y, inp(0, (4,)) + inp(world - 1, (4,)))

finish()
