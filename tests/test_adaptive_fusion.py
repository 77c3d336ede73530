"""Adaptive eager's fused passes (issue 33, stage 2): chains of elementwise ops (and
LayerNorm's forward ending them) inside a replayed sequence run tile by tile with the
ops' own CPU kernels. Every test runs the same steps plainly (adaptive eager off) and
adapted with fusion on, from the same inputs, and compares bitwise (torch.equal); the
statistics prove the sequence was replayed and fused (or that the plan refused).

Sizes: >= 65536 elements (the items run on 2 threads), odd sizes so that the thread
chunks and the vector tails are not aligned, and a few million elements where a group
must take several tiles (a tile is ~8 MiB of the group's tensors)."""

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx

DEV = "neuron"
REPS = 5  # seen twice (threshold 2), then replayed

# 2 thread chunks of 65573 (not a multiple of 128), one tile; 2 chunks of 1500001
# and several tiles each; a multiple of 128 (2 chunks of 1048576).
SIZES = [2 * 65536 + 2 * 37, 3_000_001, 2 * 1024 * 1024]
SIZE_IDS = ["131146", "3000001", "2097152"]
DTYPES = [torch.float32, torch.bfloat16]


pytestmark = pytest.mark.usefixtures("adaptive_eager_defaults")


def _rand(g, *shape, dtype=torch.float32, low=None):
    """Fixed-seed inputs, made on the CPU; `low`: uniform in [low, low + 1)."""
    t = torch.randn(*shape, generator=g) if low is None else torch.rand(*shape, generator=g) + low
    return t.to(dtype).to(DEV)


def _as_tuple(r):
    if r is None:
        return ()
    return tuple(r) if isinstance(r, (tuple, list)) else (r,)


def _run(step, make, adaptive, reps=REPS, seed=0, grad=False):
    """`make(g)` -> the state (a list; tensors in it may be changed in place);
    `step(*state)` -> tensors, copied to the host (a sync point) each repetition."""
    torch.neuron.synchronize()
    torch.neuron.reset_adaptive_eager()
    g = torch.Generator().manual_seed(seed)
    state = make(g)
    outs = []
    ctx = torch.enable_grad() if grad else torch.no_grad()
    with ctx, torch.neuron.adaptive_eager(adaptive):
        for _ in range(reps):
            outs.append([t.detach().cpu() for t in _as_tuple(step(*state))])
        torch.neuron.synchronize()
        stats = torch.neuron.adaptive_eager_stats()
    final = [t.detach().cpu() for t in state if isinstance(t, torch.Tensor)]
    return outs, final, stats


def _assert_same(plain, adapted, what=""):
    for i, (p, a) in enumerate(zip(plain, adapted, strict=True)):
        for j, (x, y) in enumerate(zip(p, a, strict=True)):
            assert x.dtype == y.dtype and x.shape == y.shape, (what, i, j)
            if not torch.equal(x, y):
                differ = (x != y) & ~(x.isnan() & y.isnan())
                idx = differ.flatten().nonzero()
                raise AssertionError(
                    f"{what}: repetition {i} output {j} differs from plain eager at "
                    f"{idx.numel()} of {x.numel()} elements (first {idx[:5].flatten().tolist()})"
                )


def _check(step, make, *, fused=True, group_sizes=None, reps=REPS, grad=False, what=""):
    """Plain vs adapted with fusion: bitwise equal outputs and final state. `fused`:
    whether fused passes must run (True) or must not (False). `group_sizes`: the ops
    each replay's fused groups hold, as a multiset (checked per replay: items_fused /
    fused_groups over the replays)."""
    plain_outs, plain_final, _ = _run(step, make, False, reps, grad=grad)
    torch_neuronx._C._adaptive_set_fuse(True)
    outs, final, stats = _run(step, make, True, reps, grad=grad)
    _assert_same(plain_outs, outs, what or "outputs")
    _assert_same([plain_final], [final], (what or "") + " final state")
    assert stats["replays"] > 0, stats
    if fused:
        assert stats["fused_groups"] > 0, stats
    else:
        assert stats["fused_groups"] == 0, stats
    if group_sizes is not None:
        per_replay = len(group_sizes)
        assert stats["fused_groups"] % per_replay == 0, (stats, group_sizes)
        rounds = stats["fused_groups"] // per_replay
        assert rounds >= 1, stats
        assert stats["items_fused"] == rounds * sum(group_sizes), (stats, group_sizes)
    return stats


# ---------------------------------------------------------------------------
# 1. The whitelisted elementwise ops, in short chains over odd sizes.


def _make_xyz(n, dtype):
    def make(g):
        x = _rand(g, n, dtype=dtype)
        y = _rand(g, n, dtype=dtype)
        z = _rand(g, n, dtype=dtype, low=0.5)  # positive: sqrt, rsqrt, div
        s0 = torch.tensor(1.75, device=DEV)  # a 0-dim fp32 operand
        buf = torch.zeros(n, dtype=dtype, device=DEV)
        buf2 = torch.zeros(n, dtype=dtype, device=DEV)
        return [x, y, z, s0, buf, buf2]

    return make


def _chain_add_sub(x, y, z, s0, buf, buf2):
    return (x + y).sub(z, alpha=0.75).add(2.5, alpha=0.5).sub(s0).add(s0, alpha=-1.5)


def _chain_mul_div(x, y, z, s0, buf, buf2):
    t = (x * y).div(z).mul(s0).div(3.0).mul(-0.5)
    return t, torch.div(t, z, rounding_mode="floor").add(torch.div(y, z, rounding_mode="trunc"))


def _chain_inplace(x, y, z, s0, buf, buf2):
    t = x * y
    t.add_(z, alpha=-0.5).mul_(1.5).div_(s0).sub_(y).div_(z)
    return t


def _chain_out(x, y, z, s0, buf, buf2):
    torch.add(x, y, alpha=0.3, out=buf)
    torch.mul(buf, z, out=buf2)
    torch.sub(buf2, x, out=buf)
    torch.div(buf, z, out=buf)  # out= aliasing its input
    return buf, buf2


def _chain_gelu(x, y, z, s0, buf, buf2):
    a = F.gelu(x + y).mul(z)
    b = F.gelu(x * z, approximate="tanh").add(y)
    return a, b


def _chain_gelu_backward(x, y, z, s0, buf, buf2):
    a = torch.ops.aten.gelu_backward(y * z, x, approximate="none").mul(0.5)
    b = torch.ops.aten.gelu_backward(y - z, x, approximate="tanh").add(z)
    return a, b


def _chain_silu_sigmoid_tanh(x, y, z, s0, buf, buf2):
    return F.silu(x + y).mul(torch.sigmoid(z)).add(torch.tanh(x)).sub(torch.sigmoid(y))


def _chain_exp_sqrt(x, y, z, s0, buf, buf2):
    return torch.exp(x * 0.25).add(torch.sqrt(z)).mul(torch.rsqrt(z)).neg().add(y)


def _chain_lerp(x, y, z, s0, buf, buf2):
    w = torch.sigmoid(y)
    return torch.lerp(x, y, 0.3).lerp(z, w).lerp(x, s0.to(x.dtype) * 0.25)


def _chain_addcmul_addcdiv(x, y, z, s0, buf, buf2):
    t = torch.addcmul(x, y, z, value=0.5)
    t = torch.addcdiv(t, y, z, value=-0.25)
    return t.addcmul_(x, y).addcdiv_(x, z, value=0.125)


def _chain_clamp(x, y, z, s0, buf, buf2):
    t = (x * y).clamp(-0.5, 0.7).clamp_min(-0.3).clamp_max(z)
    return t, torch.clamp(x + 1, min=y, max=z).clamp_(max=0.9)


def _chain_threshold_backward(x, y, z, s0, buf, buf2):
    return torch.ops.aten.threshold_backward(y * z, x, 0.0).add(x).mul(z)


def _chain_maximum_minimum(x, y, z, s0, buf, buf2):
    return torch.maximum(x, y).minimum(z).mul(2).sub(torch.minimum(x, z))


def _chain_leaky_relu(x, y, z, s0, buf, buf2):
    return F.leaky_relu(x + y, 0.01).mul(z).add(F.leaky_relu(y, 0.2))


CHAINS = {
    "add_sub": _chain_add_sub,
    "mul_div": _chain_mul_div,
    "inplace": _chain_inplace,
    "out": _chain_out,
    "gelu": _chain_gelu,
    "gelu_backward": _chain_gelu_backward,
    "silu_sigmoid_tanh": _chain_silu_sigmoid_tanh,
    "exp_sqrt_rsqrt_neg": _chain_exp_sqrt,
    "lerp": _chain_lerp,
    "addcmul_addcdiv": _chain_addcmul_addcdiv,
    "clamp": _chain_clamp,
    "threshold_backward": _chain_threshold_backward,
    "maximum_minimum": _chain_maximum_minimum,
    "leaky_relu": _chain_leaky_relu,
}


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("n", SIZES, ids=SIZE_IDS)
@pytest.mark.parametrize("chain", list(CHAINS))
def test_elementwise_chain_bitwise(chain, n, dtype):
    _check(CHAINS[chain], _make_xyz(n, dtype), what=f"{chain} n={n} {dtype}")


# Broadcast bias over rows: an op with a row operand joins a group only when its rows
# (and the thread chunks) lie on the tile alignment (128 elements).
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize(
    "rows,cols,bias_fused",
    [
        (2049, 1024, True),  # chunks split a row (at 1024.5 rows), on the alignment
        (128, 1024, True),  # one tile
        (3, 786432, True),  # rows longer than a tile
        (2049, 1000, False),  # rows off the alignment: the bias op stays out
        (67, 1000, False),
    ],
)
def test_broadcast_bias_over_rows(rows, cols, bias_fused, dtype):
    def make(g):
        return [
            _rand(g, rows, cols, dtype=dtype),
            _rand(g, cols, dtype=dtype),
            _rand(g, rows, cols, dtype=dtype),
        ]

    def step(x, b, r):
        return F.gelu(x + b).mul(r).add(x)

    # x + b, gelu, mul, add: the bias op joins, or the 3 others are a group alone.
    _check(step, make, group_sizes=[4] if bias_fused else [3], what=f"{rows}x{cols}")


def test_broadcast_in_the_middle_of_a_chain_splits_it():
    # rows of 1000: mul, [+ bias: out], gelu, add -> a group of 1 is no group: [2]
    def make(g):
        return [_rand(g, 2049, 1000), _rand(g, 1000), _rand(g, 2049, 1000)]

    def step(x, b, r):
        return F.gelu((x * r) + b).add(r)

    _check(step, make, group_sizes=[2])


def test_per_row_scale_is_not_fused_but_equal():
    # A (rows, 1) operand broadcasts over columns: no mapping fits, the op stays out.
    def make(g):
        return [_rand(g, 2049, 1024), _rand(g, 2049, 1, low=0.5), _rand(g, 2049, 1024)]

    def step(x, s, r):
        return (x * s).add(r).mul_(0.5).sub_(r)  # the 3 after the scale fuse

    _check(step, make, group_sizes=[3])


def test_mixed_dtypes_promote_bitwise():
    # bf16 and fp32 operands (an fp32 result), a bf16 0-dim operand, an int tensor.
    def make(g):
        n = 3_000_001
        return [
            _rand(g, n, dtype=torch.bfloat16),
            _rand(g, n),
            torch.randint(-3, 4, (n,), generator=g).to(DEV),
            torch.tensor(0.375, dtype=torch.bfloat16, device=DEV),
        ]

    def step(xb, y, k, sb):
        return (xb + y).mul(sb).add(k).div(xb.float().abs_().add_(1))

    _check(step, make)


# ---------------------------------------------------------------------------
# 2. bias + GELU + residual + LayerNorm.


def _make_block(rows, cols, dtype=torch.float32, grad=False):
    def make(g):
        t = [
            _rand(g, rows, cols, dtype=dtype),
            _rand(g, cols, dtype=dtype),
            _rand(g, rows, cols, dtype=dtype),
            _rand(g, cols, dtype=dtype),
            _rand(g, cols, dtype=dtype),
        ]
        if grad:
            for v in t:
                v.requires_grad_(True)
        return t

    return make


@pytest.mark.parametrize(
    "rows,cols,group",
    [
        (2049, 1024, 4),  # chunks split a row: its halves normalised after the pass
        (2048, 1024, 4),
        (2731, 768, 4),
        (2049, 1000, 3),  # the bias op stays out; rows not on the alignment
        (4097, 500, 3),
        (64, 1024, 4),  # one tile
    ],
)
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
def test_bias_gelu_residual_layernorm_no_grad(rows, cols, group, dtype):
    def step(x, b, r, w, beta):
        h = F.gelu(x + b) + r
        return F.layer_norm(h, (cols,), w, beta, eps=1e-5)

    _check(step, _make_block(rows, cols, dtype), group_sizes=[group], what=f"{rows}x{cols}")


@pytest.mark.parametrize("rows,cols", [(2049, 1024), (2049, 1000), (1025, 768)])
def test_bias_gelu_residual_layernorm_autograd(rows, cols):
    # The saved tensors (x + b for GELU's backward, LayerNorm's input, mean and rstd)
    # are held: they reach memory. Gradients too are bitwise plain eager's.
    def step(x, b, r, w, beta):
        for t in (x, b, r, w, beta):
            t.grad = None
        h = F.gelu(x + b) + r
        y = F.layer_norm(h, (cols,), w, beta, eps=1e-5)
        (y * r).sum().backward()
        return y, x.grad, b.grad, r.grad, w.grad, beta.grad

    _check(step, _make_block(rows, cols, grad=True), grad=True)


def test_layernorm_statistics_over_the_groups_dead_memory():
    # Rows of 8: mean and rstd (> 1 MiB each) are carved from a block a temporary of
    # the group held (b2's), so they are written after the pass (deferred).
    rows, cols = 300_001, 8

    def make(g):
        torch.neuron.synchronize()
        torch.neuron.empty_cache()  # the placement below depends on the free blocks
        return [_rand(g, rows, cols), _rand(g, rows, cols), _rand(g, cols), _rand(g, cols)]

    placed = []

    def step(x, y, w, beta):
        a = x * 2
        b2 = y * 3
        c = a + b2
        lo, hi = b2.data_ptr(), b2.data_ptr() + b2.nbytes
        del a, b2
        out, mean, rstd = torch.native_layer_norm(c, (cols,), w, beta, 1e-5)
        placed.append(lo <= mean.data_ptr() < hi or lo <= rstd.data_ptr() < hi)
        return out, mean, rstd

    _check(step, make, group_sizes=[4])
    assert any(placed), "the allocator no longer places mean/rstd over the dead temporary"


# ---------------------------------------------------------------------------
# 3. Training.


class _Block(torch.nn.Module):
    def __init__(self, d=256, hidden=1024):
        super().__init__()
        self.up = torch.nn.Linear(d, hidden)
        self.down = torch.nn.Linear(hidden, d)
        self.norm1 = torch.nn.LayerNorm(d)
        self.norm2 = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, 16)

    def forward(self, x):
        h = self.norm1(x)
        h = x + self.down(F.gelu(self.up(h)))
        h = self.norm2(h + F.gelu(h, approximate="tanh"))
        return self.head(h)


def _train(adaptive, foreach, steps=6):
    torch.manual_seed(0)
    model = _Block().to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, foreach=foreach)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(512, 256, generator=g).to(DEV)
    target = torch.randn(512, 16, generator=g).to(DEV)
    torch.neuron.synchronize()
    torch.neuron.reset_adaptive_eager()
    losses = []
    with torch.neuron.adaptive_eager(adaptive):
        for _ in range(steps):
            loss = F.mse_loss(model(x), target)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        stats = torch.neuron.adaptive_eager_stats()
    params = [p.detach().cpu() for p in model.parameters()]
    moments = [t.cpu() for s in opt.state.values() for t in s.values() if torch.is_tensor(t)]
    return losses, params + moments, stats


@pytest.mark.parametrize("foreach", [False, None], ids=["foreach=False", "foreach=default"])
def test_training_with_adamw_bitwise(foreach):
    plain_losses, plain_state, _ = _train(False, foreach)
    losses, state, stats = _train(True, foreach)
    assert losses == plain_losses
    _assert_same([plain_state], [state], "parameters and optimizer state")
    assert stats["replays"] > 0 and stats["fused_groups"] > 0, stats


# ---------------------------------------------------------------------------
# 4. Views, in-place ops and overlaps.


@pytest.mark.parametrize("n", [3_000_001, 131146], ids=["3000001", "131146"])
def test_chains_on_contiguous_slices(n):
    def make(g):
        return [_rand(g, n + 1000), _rand(g, 2 * n + 7), _rand(g, n)]

    def step(big, other, z):
        v = big[333 : 333 + n]  # an offset view
        w = other[n + 7 :]
        v.mul_(0.75).add_(w).clamp_(-2.0, 2.0)  # in place through the view
        return F.gelu(v + z).sub(w)

    _check(step, make)


def test_inplace_chain():
    def make(g):
        return [_rand(g, 3_000_001), _rand(g, 3_000_001), _rand(g, 3_000_001, low=0.5)]

    def step(x, a, b):
        x.mul_(a).add_(b).clamp_(-3.0, 3.0).div_(b).sub_(a, alpha=0.5)
        return x * 1.0

    _check(step, make, group_sizes=[6])


def test_transposed_views_do_not_fuse():
    def make(g):
        return [_rand(g, 1024, 2049), _rand(g, 1024, 2049)]

    def step(a, b):
        at, bt = a.t(), b.t()  # non-contiguous
        at.mul_(bt).add_(bt, alpha=0.5).clamp_(-3.0, 3.0)
        return bt.sub(at, alpha=2.0)  # a contiguous result of transposed inputs

    _check(step, make, fused=False)


@pytest.mark.parametrize("shift", [1, 128, -1, -4096])
def test_write_read_with_an_offset_ends_the_group(shift):
    # One op writes buf[o : o + n], a later op of the chain reads buf[o + shift : ...]:
    # a tile of the reader would see a later tile of the writer. The group must end
    # between them (two groups of two), with plain eager's results.
    n, k = 3_000_001, abs(shift)

    def make(g):
        return [_rand(g, n + k), _rand(g, n), _rand(g, n)]

    def step(buf, x, y):
        wr = buf[:n] if shift > 0 else buf[k:]
        rd = buf[k:] if shift > 0 else buf[:n]
        wr.mul_(0.5).add_(x)  # writes
        return (rd * y).add(1.0)  # reads, shifted

    _check(step, make, group_sizes=[2, 2], what=f"shift {shift}")


def test_bias_written_in_the_group_ends_it():
    # A row operand that an earlier op of the chain writes: no fusion across.
    def make(g):
        return [_rand(g, 2049, 1024), _rand(g, 1024), _rand(g, 2049, 1024)]

    def step(x, b, r):
        t = r * 2.0
        b.mul_(0.999)  # written (1024 elements: a group of its own would be too small)
        return F.gelu(t + b).add(x)

    _check(step, make)


def test_out_aliasing():
    n = 3_000_001

    def make(g):
        return [_rand(g, n), _rand(g, n), torch.zeros(n, device=DEV), torch.zeros(n, device=DEV)]

    def step(x, y, o1, o2):
        torch.mul(x, y, out=o1)
        torch.add(o1, x, out=o2)
        torch.sub(o2, o1, alpha=0.5, out=o1)  # o1 read and written
        torch.mul(o1, o2, out=o2)  # o2 is its own input
        torch.clamp(o2, -1.0, 1.0, out=x)  # writes an input of the first op
        return o1, o2

    _check(step, make, group_sizes=[5])


# ---------------------------------------------------------------------------
# 5. Streams, hooks, autocast, reused memory.


def test_side_stream_chain():
    n = 3_000_001
    side = torch.neuron.Stream()

    def make(g):
        return [_rand(g, n), _rand(g, n)]

    def step(x, y):
        side.wait_stream(torch.neuron.current_stream())
        with torch.neuron.stream(side):
            a = F.gelu(x + y).mul(0.5).add(y)
            a.sub_(x)
        torch.neuron.current_stream().wait_stream(side)
        a.record_stream(torch.neuron.current_stream())
        b = (a * x).add(1.0).clamp(-4.0, 4.0)
        return a, b

    _check(step, make)


def test_backward_hooks_modify_grads():
    n = 1_000_003

    def make(g):
        x = _rand(g, n)
        w = _rand(g, n)
        x.requires_grad_(True)
        w.requires_grad_(True)
        return [x, w, _rand(g, n)]

    def step(x, w, r):
        x.grad = None
        w.grad = None
        h = F.gelu(x * w + 0.1)
        h.register_hook(lambda grad: grad.mul(2.0).clamp(-1.0, 1.0))
        y = F.silu(h).add(r)
        y.register_hook(lambda grad: grad * r)
        (y * y).sum().backward()
        return y, x.grad, w.grad

    _check(step, make, grad=True)


def test_autocast_bfloat16_block():
    rows, d = 1025, 512

    def make(g):
        lin = torch.nn.Linear(d, d)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(d, d, generator=g) * 0.05)
            lin.bias.copy_(torch.randn(d, generator=g))
        lin = lin.to(DEV)
        return [_rand(g, rows, d), lin.weight, lin.bias, _rand(g, d), _rand(g, d)]

    def step(x, w, b, gamma, beta):
        with torch.autocast("neuron", dtype=torch.bfloat16):
            h = F.linear(x, w, b)  # bf16
            a = F.gelu(h) * 0.5 + h  # bf16 chain
            y = F.layer_norm(a + x, (d,), gamma, beta)  # fp32 residual, fp32 norm
        return h, a, y

    _check(step, make)


def test_freed_temporary_reused_and_read_in_the_window():
    # gelu's input is freed while the chain is issued and its block is handed to the
    # chain's result, which the window reads (copies to the host).
    n = 3_000_001

    def make(g):
        return [_rand(g, n), _rand(g, n)]

    ptrs = []

    def step(x, y):
        x.add_(0.5)  # new values every repetition
        t1 = x * 2
        p = t1.data_ptr()
        t2 = F.gelu(t1)
        del t1
        t3 = t2 + y
        ptrs.append(t3.data_ptr() == p)
        return t3

    _check(step, make, group_sizes=[4])
    assert all(ptrs)


def test_freed_temporary_reused_by_a_result_read_after_the_window():
    # As above, but the result is read only after a synchronize (in the next window):
    # t1's storage is dead at release, t3's (the same block) is held. Plain eager
    # writes t3 to memory; the fused pass must too.
    n = 3_000_001

    def make(g):
        return [_rand(g, n), _rand(g, n)]

    def step(x, y):
        x.add_(0.5)
        t1 = x * 2
        t2 = F.gelu(t1)
        del t1
        t3 = t2 + y
        torch.neuron.synchronize()  # ends the window: t3 is not read in it
        return t3

    _check(step, make)


def test_fuse_false_runs_no_fused_pass():
    n = 3_000_001
    plain = _run(_chain_gelu, _make_xyz(n, torch.float32), False)
    torch.neuron.set_adaptive_eager(False, fuse=False)
    outs, final, stats = _run(_chain_gelu, _make_xyz(n, torch.float32), True)
    assert not stats["fuse"]
    assert stats["replays"] > 0 and stats["fused_groups"] == 0 and stats["items_fused"] == 0
    _assert_same(plain[0], outs)
    _assert_same([plain[1]], [final])


# ---------------------------------------------------------------------------
# 6. What an item computes, as far as Python sees it: the profiler's fused step.


def test_profiler_shows_the_fused_step():
    from torch.profiler import ProfilerActivity, profile

    def make(g):
        return _make_block(2049, 1024)(g)

    def step(x, b, r, w, beta):
        return F.layer_norm(F.gelu(x + b) + r, (1024,), w, beta)

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]):
        _run(step, make, True)
    items = torch_neuronx._C._profiler_items()
    fused = [i for i in items if i["name"].startswith("fused ")]
    assert fused, sorted({i["name"] for i in items})
    assert fused[0]["name"] == "fused aten::add.Tensor .. aten::native_layer_norm"
    parent = items[fused[0]["parent"]]
    assert parent["name"].startswith("adaptive ")


def test_work_items_say_what_they_compute():
    # Issue 33, item 1: an eager work item carries its op and operands (storage,
    # geometry, dtype, what it writes) and its arguments, here read from a graph's
    # captured steps.
    a = torch.randn(4, 8, device="neuron")
    b = torch.randn(8, device="neuron")
    w = torch.randn(8, device="neuron")
    g = torch.neuron.NeuronGraph()
    with torch.neuron.graph(g):
        c = torch.add(a, b, alpha=2)
        c.mul_(3)
        d = torch.nn.functional.layer_norm(c, (8,), w)
    steps = g.steps()
    assert [s["op"] for s in steps] == [
        "aten::add.Tensor",
        "aten::mul_.Tensor",
        "aten::native_layer_norm",
    ]
    add, mul, norm = steps
    # add: self, other, then its new result (written), alpha among the arguments.
    assert [o["written"] for o in add["operands"]] == [False, False, True]
    assert add["operands"][0]["data_ptr"] == a.untyped_storage().data_ptr()
    assert add["operands"][1]["sizes"] == (8,) and add["operands"][1]["strides"] == (1,)
    assert add["operands"][2]["data_ptr"] == c.untyped_storage().data_ptr()
    assert add["operands"][2]["dtype"] == torch.float32
    assert add["arguments"][2] == 2
    assert [t.shape for t in (add["arguments"][0], add["arguments"][3])] == [(4, 8), (4, 8)]
    assert all(t.device.type == "meta" for t in (add["arguments"][0], add["arguments"][1]))
    # mul_: writes self; the Python number is a host scalar operand.
    assert [o["kind"] for o in mul["operands"]] == ["device", "host_scalar"]
    assert mul["operands"][0]["written"] and not mul["operands"][1]["written"]
    assert float(mul["arguments"][1]) == 3.0
    # LayerNorm: x, weight, bias (None), out, mean, rstd; writes the last three.
    assert [o["kind"] for o in norm["operands"]] == [
        "device",
        "device",
        "undefined",
        "device",
        "device",
        "device",
    ]
    assert [o["written"] for o in norm["operands"]] == [False] * 3 + [True] * 3
    assert norm["operands"][3]["data_ptr"] == d.untyped_storage().data_ptr()
    assert norm["arguments"][1] == [8] and norm["arguments"][4] == pytest.approx(1e-5)
    assert norm["operands"][4]["sizes"] == (4, 1)
    g.replay()
    torch.neuron.synchronize()
    assert torch.equal(
        d.cpu(), torch.nn.functional.layer_norm((a.cpu() + 2 * b.cpu()) * 3, (8,), w.cpu())
    )


# ---------------------------------------------------------------------------
# Attention's elementwise chain: scale, the masked_fill clone (a device copy),
# masked_fill, softmax over the last dim (a row-wise op ending the group).


def _make_scores(b, h, t, dtype=torch.float32, grad=False):
    def make(g):
        s = _rand(g, b, h, t, t, dtype=dtype)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1).to(DEV)
        if grad:
            s.requires_grad_()
        return [s, mask]

    return make


@pytest.mark.parametrize("b,h,t", [(4, 4, 128), (3, 5, 77), (2, 3, 1000)])
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
def test_scale_mask_softmax_no_grad(b, h, t, dtype):
    def step(s, mask):
        a = (s * 0.125).masked_fill(mask, float("-inf"))
        return F.softmax(a, dim=-1), torch.log_softmax(a * 2.0, dim=3)

    stats = _check(step, _make_scores(b, h, t, dtype), what=f"{b}x{h}x{t}")
    # mul, the clone, masked_fill_ and softmax: one group of 4 at least.
    assert stats["items_fused"] >= 4 * stats["replays"] // 2, stats


def test_scale_mask_softmax_autograd():
    def step(s, mask):
        s.grad = None
        a = (s * 0.125).masked_fill(mask, float("-inf"))
        p = F.softmax(a, dim=-1)
        (p * p).sum().backward()
        return p, s.grad

    _check(step, _make_scores(2, 4, 256, grad=True), grad=True)


def test_softmax_over_another_dim_is_not_fused_but_equal():
    def step(s, mask):
        return F.softmax(s * 0.5 + 1.0, dim=2)

    # The mul and add still fuse; the softmax over dim 2 is not a row-wise op.
    stats = _check(step, _make_scores(2, 4, 128), group_sizes=[2])
    assert stats["replays"] > 0


# ---------------------------------------------------------------------------
# Foreach runs: K _foreach_ ops over M tensors, run tensor by tensor.


@pytest.mark.parametrize("sizes", [[70000, 1000, 300001, 65536], [2_000_003] * 3])
def test_foreach_run_tensor_by_tensor(sizes):
    def make(g):
        return [[_rand(g, n) for n in sizes], [_rand(g, n, low=0.5) for n in sizes]]

    def step(xs, ys):
        torch._foreach_mul_(xs, 0.9)
        torch._foreach_addcmul_(xs, ys, ys, value=0.1)
        r = torch._foreach_sqrt(ys)
        torch._foreach_div_(r, 3.0)
        torch._foreach_add_(xs, r)
        return tuple(xs) + tuple(r)

    plain, _, _ = _run(step, make, False)
    outs, _, stats = _run(step, make, True)
    _assert_same(plain, outs, "foreach")
    assert stats["replays"] > 0 and stats["fused_groups"] > 0, stats
    # One fused step per replay holding all 5 ops on every tensor (K x M items).
    assert stats["items_fused"] == stats["fused_groups"] * 5 * len(sizes), stats


def test_foreach_run_whose_chains_touch_each_other_is_not_reordered():
    # Block 1 adds to each tensor its neighbour, which block 0 (and block 1) write:
    # tensor by tensor, chain 0 would read c before chain 2 scaled it. The plan must
    # keep the ops in their order.
    def make(g):
        return [[_rand(g, 100_000) for _ in range(3)]]

    def step(xs):
        torch._foreach_mul_(xs, 1.5)
        torch._foreach_add_(xs, [xs[2], xs[0], xs[1]])
        return tuple(xs)

    plain, _, _ = _run(step, make, False)
    outs, _, stats = _run(step, make, True)
    _assert_same(plain, outs, "neighbours")
    assert stats["replays"] > 0, stats
