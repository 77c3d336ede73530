"""nn.Module training on neuron gives CPU's losses, gradients and parameters."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

TOL = {"rtol": 1e-5, "atol": 1e-6}


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 16), nn.GELU(), nn.Linear(16, 4)
    )


def _batches(n=6, classes=None):
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        x = torch.randn(16, 8, generator=g)
        if classes:
            y = torch.randint(0, classes, (16,), generator=g)
        else:
            y = torch.randn(16, 4, generator=g)
        out.append((x, y))
    return out


def _mse(out, y):
    # Written out, so the optimizer tests do not depend on one loss kernel.
    return ((out - y) ** 2).mean()


OPTIMIZERS = {
    "SGD": lambda p, **kw: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-4, **kw),
    "SGD_nesterov": lambda p, **kw: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, **kw),
    "Adam": lambda p, **kw: torch.optim.Adam(p, lr=1e-2, **kw),
    "Adam_amsgrad": lambda p, **kw: torch.optim.Adam(p, lr=1e-2, amsgrad=True, **kw),
    "AdamW": lambda p, **kw: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, **kw),
}


def _train(device, make_opt, opt_kwargs, loss_fn=_mse, classes=None, clip=None):
    model = _mlp().to(device)
    opt = make_opt(model.parameters(), **opt_kwargs)
    losses = []
    for x, y in _batches(classes=classes):
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip, foreach=True)
        opt.step()
        losses.append(loss.detach())
    return (
        torch.stack([loss.cpu() for loss in losses]),
        [p.detach().cpu() for p in model.parameters()],
        opt,
    )


IMPLS = {"foreach=True": {"foreach": True}, "foreach=False": {"foreach": False}}
CASES = [(n, i) for n in OPTIMIZERS for i in IMPLS] + [
    (n, "fused") for n in ("SGD", "Adam", "AdamW")
]


@pytest.mark.parametrize(("name", "impl"), CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_optimizer_matches_cpu(name, impl):
    kwargs = {"fused": True} if impl == "fused" else IMPLS[impl]
    cpu_losses, cpu_params, _ = _train("cpu", OPTIMIZERS[name], kwargs)
    losses, params, opt = _train("neuron", OPTIMIZERS[name], kwargs)
    torch.testing.assert_close(losses, cpu_losses, **TOL)
    for p, pc in zip(params, cpu_params, strict=True):
        torch.testing.assert_close(p, pc, **TOL)
    # The optimizer state lives on the device.
    for state in opt.state.values():
        for key, v in state.items():
            if isinstance(v, torch.Tensor) and v.dim() > 0 and key != "step":
                assert v.device.type == "neuron", key


def test_backward_matches_cpu():
    ref = _mlp()
    model = copy.deepcopy(ref).neuron()
    x, y = _batches(1)[0]
    loss_c = _mse(ref(x), y)
    loss_c.backward()
    loss_n = _mse(model(x.neuron()), y.neuron())
    loss_n.backward()
    torch.testing.assert_close(loss_n.cpu(), loss_c, **TOL)
    for (name, pc), pn in zip(ref.named_parameters(), model.parameters(), strict=True):
        assert pn.grad is not None and pn.grad.device.type == "neuron", name
        torch.testing.assert_close(pn.grad.cpu(), pc.grad, **TOL)


def test_input_gradient_and_grad_accumulation():
    ref = _mlp()
    model = copy.deepcopy(ref).neuron()
    x, y = _batches(1)[0]
    xc = x.clone().requires_grad_()
    xn = x.neuron().requires_grad_()
    for _ in range(2):  # gradients accumulate over two backward passes
        _mse(ref(xc), y).backward()
        _mse(model(xn), y.neuron()).backward()
    torch.testing.assert_close(xn.grad.cpu(), xc.grad, **TOL)
    for pc, pn in zip(ref.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(pn.grad.cpu(), pc.grad, **TOL)


def test_classifier_with_cross_entropy_and_grad_clipping():
    def make(p, **kw):
        return torch.optim.AdamW(p, lr=1e-2, **kw)

    kwargs = {"foreach": True}
    cpu = _train("cpu", make, kwargs, loss_fn=F.cross_entropy, classes=4, clip=0.5)
    neu = _train("neuron", make, kwargs, loss_fn=F.cross_entropy, classes=4, clip=0.5)
    torch.testing.assert_close(neu[0], cpu[0], **TOL)
    for p, pc in zip(neu[1], cpu[1], strict=True):
        torch.testing.assert_close(p, pc, **TOL)


def _bn_models():
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4))
    return ref, copy.deepcopy(ref).neuron(), torch.randn(16, 8)


def test_batchnorm_train_mode_matches_cpu():
    ref, model, x = _bn_models()
    _mse(ref(x), torch.zeros(16, 4)).backward()
    _mse(model(x.neuron()), torch.zeros(16, 4, device="neuron")).backward()
    bn_c, bn_n = ref[1], model[1]
    torch.testing.assert_close(bn_n.running_mean.cpu(), bn_c.running_mean, **TOL)
    torch.testing.assert_close(bn_n.running_var.cpu(), bn_c.running_var, **TOL)
    assert bn_n.num_batches_tracked.item() == 1
    for pc, pn in zip(ref.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(pn.grad.cpu(), pc.grad, **TOL)


def test_batchnorm_eval_mode_matches_cpu():
    ref, model, x = _bn_models()
    ref.eval()
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(x.neuron()).cpu(), ref(x), **TOL)


LOSSES = {
    "mse_loss": lambda o, y, t: F.mse_loss(o, y),
    "mse_loss_sum": lambda o, y, t: F.mse_loss(o, y, reduction="sum"),
    "smooth_l1_loss": lambda o, y, t: F.smooth_l1_loss(o, y),
    "l1_loss": lambda o, y, t: F.l1_loss(o, y),
    "cross_entropy": lambda o, y, t: F.cross_entropy(o, t),
    "nll_loss": lambda o, y, t: F.nll_loss(F.log_softmax(o, 1), t),
    "bce_with_logits": lambda o, y, t: F.binary_cross_entropy_with_logits(o, y.sigmoid()),
}


@pytest.mark.parametrize("name", list(LOSSES))
def test_loss_forward_backward_matches_cpu(name):
    fn = LOSSES[name]
    torch.manual_seed(0)
    oc = torch.randn(8, 4)
    yc = torch.randn(8, 4)
    tc = torch.randint(0, 4, (8,))
    x = oc.clone().requires_grad_()
    xn = oc.neuron().requires_grad_()
    lc = fn(x, yc, tc)
    lc.backward()
    ln = fn(xn, yc.neuron(), tc.neuron())
    ln.backward()
    torch.testing.assert_close(ln.cpu(), lc.detach(), **TOL)
    torch.testing.assert_close(xn.grad.cpu(), x.grad, **TOL)


def test_module_to_neuron_keeps_tied_weights_tied():
    emb = torch.nn.Embedding(8, 4)
    head = torch.nn.Linear(4, 8, bias=False)
    head.weight = emb.weight
    model = torch.nn.Sequential(emb, head)
    param = emb.weight
    model.to("neuron")
    # Module.to sets .data in place (as for CUDA): the same Parameter, still shared.
    assert head.weight is emb.weight is param
    assert param.device.type == "neuron"


def test_small_gpt_training_matches_cpu():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from examples.gpt.model import GPT, GPTConfig

    def losses(device):
        torch.manual_seed(0)
        cfg = GPTConfig(vocab_size=32, n_layer=2, n_head=2, d_model=32, seq_len=16)
        model = GPT(cfg).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        g = torch.Generator().manual_seed(1)
        x = torch.randint(0, 32, (4, 16), generator=g).to(device)
        y = torch.randint(0, 32, (4, 16), generator=g).to(device)
        out = []
        for _ in range(4):
            _, loss = model(x, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out

    torch.testing.assert_close(losses("neuron"), losses("cpu"), rtol=1e-5, atol=1e-5)
