"""One rank of the compiled-collectives job: functional collectives traced into a
graph compiled with backend="neuron" run as steps of its device program, in order
with the graph's kernels; every rank compiles the same graphs into one shared cache
directory (TORCH_NEURONX_NEFF_CACHE_DIR, set by the test) at the same time.

Prints ``COMPILED_FILES <n>``: the C++ libraries this rank built (Inductor's
``CppBuilder.build`` of a ``.so``), which the test sums over the ranks.
"""

import torch
import torch._inductor.cpp_builder as cpp_builder
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from common import dev, expect, expect_close, finish, rank, setup, world
from torch._dynamo.utils import counters

import torch_neuronx

setup()
built = []
_build = cpp_builder.CppBuilder.build


def counting_build(self, *args, **kwargs):
    if self.get_target_file_path().endswith(".so"):
        built.append(self.get_target_file_path())
    return _build(self, *args, **kwargs)


cpp_builder.CppBuilder.build = counting_build
torch.manual_seed(0)
WORLD = dist.group.WORLD


def inp(r, shape):
    return (torch.arange(torch.Size(shape).numel(), dtype=torch.float32) % 5 + r).reshape(shape)


def everyone(shape):
    return [inp(r, shape) for r in range(world)]


# ---- a graph with compute on both sides of each collective
def step(x, w):
    h = (x @ w).relu() * 2
    h = funcol.all_reduce(h, "sum", WORLD)
    g = funcol.all_gather_tensor(h + 1, 0, WORLD)
    s = funcol.reduce_scatter_tensor(g.sin(), "avg", 0, WORLD)
    return h, g, s.cos()


def reference(w):
    hs = [((x @ w).relu() * 2) for x in everyone((4, 8))]
    h = torch.stack(hs).sum(0)
    g = torch.cat([h + 1] * world)
    s = g.sin().chunk(world)[rank]  # every rank's g is the same: the avg is g.sin()
    return h, g, s.cos()


w = torch.randn(8, 8)
torch.neuron.reset_dynamo_metrics()
compiled = torch.compile(step, backend="neuron", fullgraph=True)
got = compiled(inp(rank, (4, 8)).to(dev), w.to(dev))
NAMES = ("all_reduce", "all_gather_tensor", "reduce_scatter_tensor")
for name, a, b in zip(NAMES, got, reference(w), strict=True):
    expect_close(f"compiled {name}", a, b, rtol=1e-5, atol=1e-4)

records = torch.neuron.get_dynamo_metrics()
expect("one graph, compiled", [r.fell_back for r in records] == [False], records)
expect("the graph has collectives", all(r.has_collectives for r in records), records)
expect(
    "counters count it",
    counters["neuron"]["graphs_with_collectives"] == 1,
    dict(counters["neuron"]),
)

# ---- the collectives run inside the program: one work item per call
torch.neuron.synchronize()
torch_neuronx._C._trace_enable(True)
torch_neuronx._C._trace_drain()
for _ in range(3):
    got = compiled(inp(rank, (4, 8)).to(dev), w.to(dev))
torch.neuron.synchronize()
labels = [r["label"] for r in torch_neuronx._C._trace_drain()]
torch_neuronx._C._trace_enable(False)
programs = [lb for lb in labels if lb.startswith("compiled graph")]
expect("each call one program", len(programs) == 3, labels)
expect_close("repeated calls", got[0], reference(w)[0], rtol=1e-5, atol=1e-4)

print("COMPILED_FILES", len(built), flush=True)
finish()
