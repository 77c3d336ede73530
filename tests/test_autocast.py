"""Autocast (``torch.autocast("neuron")``) and ``torch.amp.GradScaler("neuron")``.

The op policy is CUDA's: each op below is checked against the dtype CUDA's lists give
it, and its values against the CPU running the same op with the same casts done by
hand (and against CPU autocast where the CPU's policy agrees with CUDA's).
"""

from __future__ import annotations

import copy
import math
import threading
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_neuronx

BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32
DEV = "neuron"


def _tol(dtype: torch.dtype) -> dict:
    if dtype in (BF16, F16):
        return {"rtol": 2e-2, "atol": 2e-2}
    return {"rtol": 1e-3, "atol": 1e-3}


# ---------------------------------------------------------------------------
# availability, defaults, dispatch


def test_available_and_default_dtype_is_float16_as_torchneuron():
    # TorchNeuron leaves the default at PyTorch's PrivateUse1 default, float16;
    # bfloat16 is one argument away.
    assert torch.amp.is_autocast_available(DEV)
    assert torch.get_autocast_dtype(DEV) == F16
    assert torch.neuron.get_amp_supported_dtype() == [F16, BF16]
    a = torch.randn(4, 4, device=DEV)
    with torch.autocast(DEV) as ac:
        assert ac.fast_dtype == F16
        assert torch.is_autocast_enabled(DEV)
        assert (a @ a).dtype == F16
    with torch.autocast(DEV, dtype=BF16):
        assert (a @ a).dtype == BF16
    assert not torch.is_autocast_enabled(DEV)


def test_default_dtype_is_the_same_in_every_thread(run_py, check):
    # The default is not thread-local state set at import: a thread started
    # later, the autoloading thread and autograd's workers all see float16.
    out = check(
        run_py(
            """
            import threading
            import torch
            seen = []
            def probe():
                a = torch.randn(4, 4, device="neuron")
                with torch.autocast("neuron"):
                    seen.append(str((a @ a).dtype))
            probe()
            t = threading.Thread(target=probe)
            t.start()
            t.join()
            print(torch.get_autocast_dtype("neuron"), *seen)
            """
        )
    )
    assert out.split() == ["torch.float16", "torch.float16", "torch.float16"]


def test_checkpoint_sequential_under_default_autocast_yields_float16():
    # The pattern of TorchNeuron's own tests: a bare torch.autocast("neuron")
    # around checkpoint_sequential gives float16 activations.
    from torch.utils.checkpoint import checkpoint_sequential

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)).to(DEV)
    x = torch.randn(3, 8, device=DEV, requires_grad=True)
    with torch.autocast(DEV):
        out = checkpoint_sequential(model, 2, x, use_reentrant=False)
    assert out.dtype == F16
    out.float().sum().backward()
    assert x.grad is not None and x.grad.dtype == F32
    expected = copy.deepcopy(model).cpu().half()(x.detach().cpu().half())
    torch.testing.assert_close(out.cpu(), expected, **_tol(F16))


def test_neuron_tensors_carry_the_autocast_key():
    x = torch.randn(2, device=DEV)
    assert "AutocastPrivateUse1" in str(torch._C._dispatch_keys(x))


def test_registered_ops_are_cudas():
    # The same operators get an autocast kernel as on CUDA (the cuDNN ops aside,
    # which only exist there: cudnn_* in every torch build, and _cudnn_rnn,
    # registered by a CUDA build of torch); everything else falls through.
    cuda = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA"))
    ours = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastPrivateUse1"))
    cuda = {op for op in cuda if not op.startswith(("aten::cudnn_", "aten::_cudnn_"))}
    assert ours == cuda


# ---------------------------------------------------------------------------
# op policy: dtype and values


def _mat(*shape, positive=False):
    t = torch.randn(*shape)
    return t.abs() + 0.5 if positive else t


def _cases():
    """(name, fn, make_args, policy); make_args builds CPU inputs."""
    # Index and target tensors are arguments too, so that they move with the rest.
    idx = torch.tensor([0, 2, 1])
    tgt = torch.tensor([1, 0, 3, 2])
    lower = [
        ("mm", torch.mm, lambda: [_mat(8, 16), _mat(16, 4)]),
        ("matmul", torch.matmul, lambda: [_mat(2, 8, 16), _mat(16, 4)]),
        ("linear", F.linear, lambda: [_mat(8, 16), _mat(4, 16), _mat(4)]),
        ("bmm", torch.bmm, lambda: [_mat(3, 8, 16), _mat(3, 16, 4)]),
        ("addmm", torch.addmm, lambda: [_mat(8, 4), _mat(8, 16), _mat(16, 4)]),
        ("baddbmm", torch.baddbmm, lambda: [_mat(3, 8, 4), _mat(3, 8, 16), _mat(3, 16, 4)]),
        ("addbmm", torch.addbmm, lambda: [_mat(8, 4), _mat(3, 8, 16), _mat(3, 16, 4)]),
        ("addmv", torch.addmv, lambda: [_mat(8), _mat(8, 16), _mat(16)]),
        ("mv", torch.mv, lambda: [_mat(8, 16), _mat(16)]),
        ("conv1d", F.conv1d, lambda: [_mat(2, 3, 16), _mat(4, 3, 3), _mat(4)]),
        ("conv2d", F.conv2d, lambda: [_mat(2, 3, 8, 8), _mat(4, 3, 3, 3), _mat(4)]),
        ("conv_transpose2d", F.conv_transpose2d, lambda: [_mat(2, 4, 5, 5), _mat(4, 3, 3, 3)]),
        ("prelu", F.prelu, lambda: [_mat(4, 3, 5), _mat(3)]),
        (
            "einsum",
            lambda a, b: torch.einsum("ij,jk->ik", a, b),
            lambda: [_mat(8, 16), _mat(16, 4)],
        ),
        (
            "multi_dot",
            lambda a, b, c: torch.linalg.multi_dot([a, b, c]),
            lambda: [_mat(4, 8), _mat(8, 8), _mat(8, 2)],
        ),
        (
            "sdpa",
            F.scaled_dot_product_attention,
            lambda: [_mat(2, 2, 8, 16), _mat(2, 2, 8, 16), _mat(2, 2, 8, 16)],
        ),
    ]
    # Low-precision inputs: fp32 ops must upcast them.
    fp32 = [
        ("exp", torch.exp, lambda: [_mat(8, 16)]),
        ("log", torch.log, lambda: [_mat(8, 16, positive=True)]),
        ("pow", lambda a: torch.pow(a, 3), lambda: [_mat(8, 16)]),
        ("rsqrt", torch.rsqrt, lambda: [_mat(8, 16, positive=True)]),
        ("softplus", F.softplus, lambda: [_mat(8, 16)]),
        (
            "layer_norm",
            lambda a, w, b: F.layer_norm(a, (16,), w, b),
            lambda: [_mat(8, 16), _mat(16), _mat(16)],
        ),
        ("group_norm", lambda a: F.group_norm(a, 2), lambda: [_mat(2, 4, 6)]),
        ("rms_norm", lambda a: F.rms_norm(a, (16,)), lambda: [_mat(8, 16)]),
        ("softmax", lambda a: torch.softmax(a, -1), lambda: [_mat(8, 16)]),
        ("log_softmax", lambda a: F.log_softmax(a, -1), lambda: [_mat(8, 16)]),
        ("sum", torch.sum, lambda: [_mat(8, 16)]),
        ("sum_dim", lambda a: a.sum(1), lambda: [_mat(8, 16)]),
        ("cumsum", lambda a: a.cumsum(1), lambda: [_mat(8, 16)]),
        ("prod", lambda a: a.prod(1), lambda: [_mat(8, 4, positive=True)]),
        ("logsumexp", lambda a: a.logsumexp(1), lambda: [_mat(8, 16)]),
        ("norm", lambda a: a.norm(), lambda: [_mat(8, 16)]),
        ("vector_norm", torch.linalg.vector_norm, lambda: [_mat(8, 16)]),
        ("mse_loss", F.mse_loss, lambda: [_mat(8, 16), _mat(8, 16)]),
        ("l1_loss", F.l1_loss, lambda: [_mat(8, 16), _mat(8, 16)]),
        ("cross_entropy", F.cross_entropy, lambda: [_mat(4, 5), tgt]),
        ("nll_loss", F.nll_loss, lambda: [_mat(4, 5), tgt]),
        (
            "bce_with_logits",
            F.binary_cross_entropy_with_logits,
            lambda: [_mat(8, 4), torch.rand(8, 4)],
        ),
        ("cosine_similarity", F.cosine_similarity, lambda: [_mat(8, 16), _mat(8, 16)]),
        ("cdist", torch.cdist, lambda: [_mat(6, 4), _mat(5, 4)]),
        (
            "interpolate",
            lambda a: F.interpolate(a, scale_factor=2, mode="bilinear"),
            lambda: [_mat(1, 2, 4, 4)],
        ),
    ]
    # Mixed low-precision / float32 inputs: run in the widest type.
    promote = [
        ("addcmul", torch.addcmul, lambda: [_mat(8), _mat(8), _mat(8)]),
        ("addcdiv", torch.addcdiv, lambda: [_mat(8), _mat(8), _mat(8, positive=True)]),
        ("atan2", torch.atan2, lambda: [_mat(8), _mat(8)]),
        ("cross", lambda a, b: torch.cross(a, b, dim=1), lambda: [_mat(4, 3), _mat(4, 3)]),
        ("dot", torch.dot, lambda: [_mat(16), _mat(16)]),
        ("tensordot", lambda a, b: torch.tensordot(a, b, dims=1), lambda: [_mat(4, 8), _mat(8, 3)]),
        ("index_put", lambda a, i, v: a.index_put((i,), v), lambda: [_mat(5, 4), idx, _mat(3, 4)]),
        (
            "scatter_add",
            lambda a, i, s: a.scatter_add(0, i, s),
            lambda: [_mat(5, 4), idx.view(3, 1).expand(3, 4), _mat(3, 4)],
        ),
    ]
    # On no list: the op runs on its inputs as they are.
    untouched = [
        ("relu", torch.relu, lambda: [_mat(8, 16)]),
        ("gelu", F.gelu, lambda: [_mat(8, 16)]),
        ("mean", torch.mean, lambda: [_mat(8, 16)]),
        ("add", torch.add, lambda: [_mat(8), _mat(8)]),
    ]
    return (
        [(n, f, m, "lower") for n, f, m in lower]
        + [(n, f, m, "fp32") for n, f, m in fp32]
        + [(n, f, m, "promote") for n, f, m in promote]
        + [(n, f, m, "untouched") for n, f, m in untouched]
    )


CASES = _cases()


def _inputs_for(policy: str, args: list[torch.Tensor], low: torch.dtype) -> list[torch.Tensor]:
    """What the user passes in: fp32 for lower-precision ops, low precision for fp32
    ops (so the upcast shows), mixed for promote ops, low precision for the rest."""
    out = []
    n_float = 0
    for a in args:
        if not a.is_floating_point():
            out.append(a)
            continue
        if policy == "lower":
            out.append(a)
        elif policy == "promote":
            out.append(a.to(low) if n_float % 2 == 0 else a)
        else:
            out.append(a.to(low))
        n_float += 1
    return out


def _policy_dtype(policy: str, inputs: list[torch.Tensor], low: torch.dtype) -> torch.dtype:
    floats = [a.dtype for a in inputs if a.is_floating_point()]
    if policy == "lower":
        return low
    if policy == "fp32":
        return F32
    if policy == "promote":
        return F32 if F32 in floats else low
    return floats[0]


@pytest.mark.parametrize("name,fn,make,policy", CASES, ids=[c[0] for c in CASES])
def test_op_policy(name, fn, make, policy):
    torch.manual_seed(0)
    inputs = _inputs_for(policy, make(), BF16)
    op_dtype = _policy_dtype(policy, inputs, BF16)

    with torch.autocast(DEV, dtype=BF16):
        out = fn(*[a.to(DEV) for a in inputs])
    # The CPU reference does autocast's casts by hand and runs the op plainly.
    ref = fn(*[a.to(op_dtype) if a.is_floating_point() else a for a in inputs])

    if policy == "untouched":
        assert out.dtype == ref.dtype
    else:
        assert out.dtype == op_dtype
    torch.testing.assert_close(out.cpu(), ref, **_tol(out.dtype))

    # Where the CPU's own autocast policy gives the same dtype, the values agree too.
    # (The CPU promotes fewer ops: mixed-dtype dot or scatter_add fail there.)
    try:
        with torch.autocast("cpu", dtype=BF16):
            cpu_out = fn(*inputs)
    except RuntimeError:
        assert policy == "promote"
        return
    if cpu_out.dtype == out.dtype:
        torch.testing.assert_close(out.cpu(), cpu_out, **_tol(out.dtype))


def test_any_neuron_device(two_devices):
    a = torch.randn(4, 4, device="neuron:1")
    with torch.autocast(DEV, dtype=BF16):
        out = a @ a
        sm = out.softmax(-1)
    assert out.dtype == BF16 and out.device == a.device
    assert sm.dtype == F32 and sm.device == a.device
    torch.testing.assert_close(out.cpu(), a.cpu().bfloat16() @ a.cpu().bfloat16())


def test_cat_and_stack_promote_like_cuda():
    # Not on CUDA's autocast lists: their own type promotion gives the widest type.
    a = torch.randn(2, 3, device=DEV, dtype=BF16)
    b = torch.randn(2, 3, device=DEV)
    with torch.autocast(DEV, dtype=BF16):
        assert torch.cat([a, b]).dtype == F32
        assert torch.stack([a, b]).dtype == F32
        assert torch.cat([a, a]).dtype == BF16


def test_non_float_and_double_inputs_are_not_cast():
    i = torch.arange(6, device=DEV).view(2, 3)
    d = torch.randn(3, 3, device=DEV, dtype=torch.float64)
    with torch.autocast(DEV, dtype=BF16):
        assert torch.mm(i, i.t()).dtype == torch.int64
        assert torch.mm(d, d).dtype == torch.float64
        assert torch.exp(d).dtype == torch.float64


def test_explicit_dtype_argument_wins():
    x = torch.randn(4, 8, device=DEV, dtype=BF16)
    with torch.autocast(DEV, dtype=BF16):
        assert torch.softmax(x, -1, dtype=torch.float64).dtype == torch.float64
        assert x.sum(dtype=BF16).dtype == BF16


def test_float16_is_allowed_and_the_region_restores_the_dtype():
    a = torch.randn(8, 16)
    b = torch.randn(16, 4)
    with torch.autocast(DEV, dtype=BF16):
        assert torch.get_autocast_dtype(DEV) == BF16
    assert torch.get_autocast_dtype(DEV) == F16
    with torch.autocast(DEV, dtype=F16):
        assert torch.get_autocast_dtype(DEV) == F16
        out = torch.mm(a.to(DEV), b.to(DEV))
        sm = torch.softmax(out, -1)
    assert out.dtype == F16
    assert sm.dtype == F32
    torch.testing.assert_close(out.cpu(), torch.mm(a.half(), b.half()), **_tol(F16))
    assert torch.get_autocast_dtype(DEV) == F16


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32])
def test_unsupported_dtype_warns_and_disables(dtype):
    # PyTorch's rule for every device but CUDA: warn, and run the region without
    # autocast (CUDA takes any dtype it is given).
    a = torch.randn(4, 4, device=DEV)
    with pytest.warns(UserWarning) as rec:
        ctx = torch.autocast(DEV, dtype=dtype)
    msg = str(rec[0].message)
    assert "In neuron autocast, but the target dtype is not supported" in msg
    assert "torch.float16, torch.bfloat16" in msg
    with ctx:
        assert not torch.is_autocast_enabled(DEV)
        assert (a @ a).dtype == F32
    # The device and autocast still work afterwards.
    with torch.autocast(DEV, dtype=BF16):
        assert (a @ a).dtype == BF16


def test_bad_device_type_argument():
    with pytest.raises(ValueError, match="Expected `device_type` of type `str`"):
        torch.autocast(torch.device(DEV))


def test_binary_cross_entropy_is_refused_like_cuda():
    p = torch.rand(4, 3, device=DEV)
    t = torch.rand(4, 3, device=DEV)
    with torch.autocast(DEV, dtype=BF16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(p, t)
        assert F.binary_cross_entropy_with_logits(p, t).dtype == F32
    # Outside autocast it is an ordinary op.
    torch.testing.assert_close(
        F.binary_cross_entropy(p, t).cpu(), F.binary_cross_entropy(p.cpu(), t.cpu())
    )


def test_nested_and_disabled_regions():
    a = torch.randn(4, 4, device=DEV)
    with torch.autocast(DEV, dtype=BF16):
        assert (a @ a).dtype == BF16
        with torch.autocast(DEV, enabled=False):
            assert not torch.is_autocast_enabled(DEV)
            assert (a @ a).dtype == F32
        with torch.autocast(DEV, dtype=F16):
            assert (a @ a).dtype == F16
            with torch.autocast(DEV, enabled=False):
                assert (a @ a).dtype == F32
            assert (a @ a).dtype == F16
        assert (a @ a).dtype == BF16
        assert torch.get_autocast_dtype(DEV) == BF16
    assert not torch.is_autocast_enabled(DEV)
    assert (a @ a).dtype == F32


def test_decorator_form():
    @torch.autocast(DEV, dtype=BF16)
    def f(x):
        return x @ x

    assert f(torch.randn(4, 4, device=DEV)).dtype == BF16


def test_other_devices_autocast_is_independent():
    a = torch.randn(4, 4, device=DEV)
    c = torch.randn(4, 4)
    with torch.autocast(DEV, dtype=BF16):
        assert (c @ c).dtype == F32  # CPU tensors: CPU autocast is off
    with torch.autocast("cpu"):
        assert (a @ a).dtype == F32
        assert (c @ c).dtype == BF16


def test_autocast_state_is_per_thread():
    # As on every device: a region opened in one thread does not leak into another.
    a = torch.randn(4, 4, device=DEV)
    seen = []
    with torch.autocast(DEV, dtype=BF16):
        t = threading.Thread(target=lambda: seen.append((a @ a).dtype))
        t.start()
        t.join()
    assert seen == [F32]


def _cast_node(y: torch.Tensor, param: torch.Tensor):
    """The autograd node of the cast that fed ``param`` into ``y``."""
    stack, seen = [y.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for nxt, _ in node.next_functions:
            if nxt is not None and getattr(nxt, "variable", None) is param:
                return node
            stack.append(nxt)
    raise AssertionError("param not found in the graph")


def test_weight_casts_are_cached_within_a_region():
    # Leaf fp32 weights are cast once per region (the autocast cache): two uses
    # share one cast. The cache is dropped when the outermost region exits, and
    # cache_enabled=False turns it off.
    lin = nn.Linear(8, 8).to(DEV)
    x = torch.randn(2, 8, device=DEV)
    with torch.autocast(DEV, dtype=BF16):
        y1, y2 = lin(x), lin(x)
    assert _cast_node(y1, lin.weight) is _cast_node(y2, lin.weight)
    with torch.autocast(DEV, dtype=BF16):
        y3 = lin(x)
    assert _cast_node(y3, lin.weight) is not _cast_node(y1, lin.weight)
    with torch.autocast(DEV, dtype=BF16, cache_enabled=False):
        y4, y5 = lin(x), lin(x)
    assert _cast_node(y4, lin.weight) is not _cast_node(y5, lin.weight)
    torch.testing.assert_close(y1, y4, rtol=0, atol=0)


# ---------------------------------------------------------------------------
# autocast + backward


def _small_net_params(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "w1": torch.randn(32, 16, generator=g) / 4,
        "b1": torch.randn(32, generator=g) / 4,
        "ln_w": 1 + torch.randn(32, generator=g) / 10,
        "ln_b": torch.randn(32, generator=g) / 10,
        "w2": torch.randn(5, 32, generator=g) / 4,
        "b2": torch.randn(5, generator=g) / 4,
    }


def _small_net(p, x, t, low=None):
    """linear -> gelu -> layer_norm -> linear -> cross_entropy. With ``low`` it casts
    by hand exactly as autocast's policy does."""
    c = (lambda v: v.to(low)) if low else (lambda v: v)
    h = F.gelu(F.linear(c(x), c(p["w1"]), c(p["b1"])))
    if low:
        h = h.float()
    h = F.layer_norm(h, (32,), p["ln_w"], p["ln_b"])
    out = F.linear(c(h), c(p["w2"]), c(p["b2"]))
    if low:
        out = out.float()
    return out, F.cross_entropy(out, t)


def test_autocast_forward_then_backward():
    params = _small_net_params()
    x = torch.randn(8, 16)
    t = torch.randint(0, 5, (8,))

    dev_p = {k: v.to(DEV).requires_grad_() for k, v in params.items()}
    with torch.autocast(DEV, dtype=BF16):
        out, loss = _small_net(dev_p, x.to(DEV), t.to(DEV))
    assert out.dtype == BF16 and loss.dtype == F32
    loss.backward()

    ref_p = {k: v.clone().requires_grad_() for k, v in params.items()}
    ref_out, ref_loss = _small_net(ref_p, x, t, low=BF16)
    ref_loss.backward()

    torch.testing.assert_close(loss.cpu(), ref_loss, rtol=1e-3, atol=1e-3)
    for k in params:
        g = dev_p[k].grad
        assert g.dtype == F32 and g.device.type == DEV
        torch.testing.assert_close(g.cpu(), ref_p[k].grad, rtol=3e-2, atol=3e-2)


def test_backward_inside_region_matches_outside():
    # Backward ops run in the dtype their forward ran in, wherever backward is called.
    lin = nn.Linear(8, 4).to(DEV)
    x = torch.randn(6, 8, device=DEV)
    grads = []
    for inside in (False, True):
        lin.zero_grad()
        with torch.autocast(DEV, dtype=BF16):
            loss = lin(x).float().square().mean()
            if inside:
                loss.backward()
        if not inside:
            loss.backward()
        grads.append(lin.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)


# ---------------------------------------------------------------------------
# GradScaler


def _scaler_run(device: str) -> tuple[list[float], list[bool], dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = nn.Linear(8, 4).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**10, growth_interval=2)
    g = torch.Generator().manual_seed(1)
    scales, skipped = [], []
    for step in range(6):
        x = torch.randn(16, 8, generator=g).to(device)
        opt.zero_grad()
        with torch.autocast(device, dtype=F16):
            loss = model(x).float().square().mean()
        scaler.scale(loss).backward()
        if step == 2:
            model.weight.grad[0, 0] = float("inf")
        if step == 3:
            model.bias.grad[1] = float("nan")
        before = [p.detach().cpu().clone() for p in model.parameters()]
        scaler.step(opt)
        scaler.update()
        after = [p.detach().cpu() for p in model.parameters()]
        skipped.append(all(torch.equal(b, a) for b, a in zip(before, after, strict=True)))
        scales.append(scaler.get_scale())
    if device == DEV:
        assert scaler._scale.device.type == DEV
        assert scaler._growth_tracker.device.type == DEV
    return scales, skipped, {k: v.detach().cpu() for k, v in model.state_dict().items()}


def test_grad_scaler_skips_steps_with_inf_or_nan_like_cpu():
    torch_neuronx.clear_op_stats()
    scales, skipped, state = _scaler_run(DEV)
    executed = torch_neuronx.get_executed_ops()
    # unscale_ and update run as device work, not on the host.
    assert "aten::_amp_foreach_non_finite_check_and_unscale_" in executed
    assert "aten::_amp_update_scale_" in executed
    assert not torch_neuronx.get_fallback_ops()

    cpu_scales, cpu_skipped, cpu_state = _scaler_run("cpu")
    assert skipped == [False, False, True, True, False, False]
    assert skipped == cpu_skipped
    assert scales == cpu_scales
    # growth after 2 clean steps, backoff (x0.5) at each bad one
    assert scales[1] == 2 * scales[0] and scales[2] == scales[1] / 2 == scales[3] * 2
    for k in state:
        torch.testing.assert_close(state[k], cpu_state[k], rtol=1e-2, atol=1e-3)


def test_grad_scaler_unscale_then_clip():
    # unscale_ before clipping; the grads seen are the true ones.
    torch.manual_seed(0)
    model = nn.Linear(8, 4).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(DEV, init_scale=256.0)
    x = torch.randn(4, 8, device=DEV)
    with torch.autocast(DEV, dtype=F16):
        loss = model(x).float().sum()
    scaler.scale(loss).backward()
    scaled = model.weight.grad.clone()
    scaler.unscale_(opt)
    torch.testing.assert_close(model.weight.grad * 256, scaled, rtol=0, atol=0)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 256.0
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
        scaler.unscale_(opt)
        scaler.unscale_(opt)


def test_grad_scaler_float16_training_loss_goes_down():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 16, generator=g)
    w_true = torch.randn(16, 1, generator=g)
    y = torch.tanh(x @ w_true) + 0.05 * torch.randn(256, 1, generator=g)
    x, y = x.to(DEV), y.to(DEV)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)).to(DEV)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler(DEV)
    losses = []
    for _ in range(40):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(DEV, dtype=F16):
            pred = model(x)
            assert pred.dtype == F16
            loss = F.mse_loss(pred, y)
        assert loss.dtype == F32
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.detach())
    losses = torch.stack(losses).cpu().tolist()
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < 0.2 * losses[0], losses
    assert all(p.dtype == F32 for p in model.parameters())
    assert math.isfinite(scaler.get_scale()) and scaler.get_scale() > 0


def test_grad_scaler_refuses_float16_gradients():
    # As on CUDA: parameters (and so gradients) must stay float32 under autocast.
    p = nn.Parameter(torch.ones(4, device=DEV, dtype=F16))
    opt = torch.optim.SGD([p], lr=0.1)
    scaler = torch.amp.GradScaler(DEV)
    scaler.scale(p.float().sum()).backward()
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        scaler.unscale_(opt)


def test_grad_scaler_state_dict_round_trip():
    scaler = torch.amp.GradScaler(DEV, init_scale=8.0, growth_interval=1)
    p = nn.Parameter(torch.ones(2, device=DEV))
    opt = torch.optim.SGD([p], lr=0.1)
    scaler.scale(p.sum()).backward()
    scaler.step(opt)
    scaler.update()
    sd = scaler.state_dict()
    assert sd["scale"] == 16.0
    other = torch.amp.GradScaler(DEV)
    other.load_state_dict(sd)
    assert other.get_scale() == 16.0


def test_no_warnings_in_a_plain_region():
    a = torch.randn(4, 4, device=DEV)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.autocast(DEV, dtype=BF16):
            (a @ a).float().softmax(-1).sum().item()


# ---------------------------------------------------------------------------
# the GPT example


def test_gpt_example_amp_bf16_tracks_float32(capsys):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from examples.gpt.train import parse_args, train

    small = ["--device", DEV, "--steps", "8", "--batch", "4", "--seq-len", "16"]
    small += ["--n-layer", "1", "--d-model", "32", "--n-head", "2", "--sample-chars", "0"]
    assert parse_args(small).amp == "none"  # float32 stays the default
    fp32 = train(parse_args(small))
    bf16 = train(parse_args([*small, "--amp", "bf16"]))
    assert "amp=bf16" in capsys.readouterr().out
    assert fp32 != bf16  # autocast did change the arithmetic
    assert max(abs(a - b) for a, b in zip(fp32, bf16, strict=True)) < 0.05
    assert bf16[-1] < bf16[0]


def test_higher_order_operators_run_in_a_region():
    # torch.cond (a higher-order operator) meets neuron's autocast key: it falls
    # through as CUDA's does, and the branch's ops autocast as usual.
    x = torch.ones(4, 4, device=DEV)
    with torch.autocast(DEV, dtype=BF16):
        out = torch.cond(x.sum() > 0, lambda t: t @ t, lambda t: t @ -t, (x,))
    assert out.dtype == BF16
    assert torch.equal(out.float().cpu(), torch.full((4, 4), 4.0))
