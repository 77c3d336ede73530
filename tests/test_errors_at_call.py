"""Errors CUDA raises at the call are raised at the call on neuron.

Argument checks that live only in an op's CPU kernel (an unsupported dtype, an
option string, a mask of the wrong dtype, an overlapping output) are caught by
running the first call of each argument signature as a work item the host waits
for; checks on floating-point values and sizes are made on the host
(csrc/eager/first_call_validation.h, csrc/eager/call_checks.h). Each case here
raises on the CPU; on neuron it must raise at the call, with the CPU's exception
type and message, and leave nothing pending.
"""

import warnings

import pytest
import torch
import torch.nn.functional as F

N = torch.neuron


def _e(*size, **kw):
    return torch.empty(*size, **kw)


def _long(*size, d):
    return torch.zeros(*size, dtype=torch.long, device=d)


def _mask(*size, d, dtype=torch.bool):
    return torch.ones(*size, dtype=dtype, device=d)


CASES = {
    # Floating-point argument values (host checks).
    "uniform_ from > to": lambda d: _e(3, device=d).uniform_(3, -1),
    "uniform_ bound out of range": lambda d: _e(3, dtype=torch.half, device=d).uniform_(0, 1e6),
    "bernoulli_ p > 1": lambda d: _e(3, device=d).bernoulli_(1.5),
    "bernoulli p < 0": lambda d: torch.bernoulli(_e(3, device=d), p=-0.5),
    "masked_fill complex into float": lambda d: _e(2, device=d).masked_fill(_mask(2, d=d), 1j),
    "masked_fill_ overflow": lambda d: torch.zeros(2, dtype=torch.int8, device=d).masked_fill_(
        _mask(2, d=d), 1000
    ),
    "fill_ overflow": lambda d: torch.zeros(2, dtype=torch.uint8, device=d).fill_(300),
    "fill_ half overflow": lambda d: torch.zeros(2, dtype=torch.half, device=d).fill_(1e6),
    "index_fill_ overflow": lambda d: torch.zeros(3, dtype=torch.int8, device=d).index_fill_(
        0, _long(1, d=d), 300
    ),
    # Sizes the Meta kernel does not look at (host checks).
    "multinomial n > categories": lambda d: torch.multinomial(torch.ones(2, device=d), 3),
    # Overlap of out= before it is resized (host checks).
    "index_select out= expanded": lambda d: torch.index_select(
        torch.rand(3, 6, device=d),
        1,
        torch.tensor([0, 1], device=d),
        out=torch.rand(1, 6, device=d).expand(2, 6),
    ),
    # Checks inside the CPU kernel (first-call validation).
    "uniform_ on expanded tensor": lambda d: _e(1, device=d).expand(3).uniform_(),
    "random_ from >= to": lambda d: _e(3, device=d).random_(5, 2),
    "random_ to beyond dtype": lambda d: _e(3, dtype=torch.uint8, device=d).random_(0, 1000),
    "randint low >= high": lambda d: torch.randint(5, 2, (3,), device=d),
    "gelu approximate": lambda d: F.gelu(_e(3, device=d), approximate="bad"),
    "gelu_ approximate": lambda d: torch._C._nn.gelu_(_e(3, device=d), approximate="bad"),
    "index_select index dtype": lambda d: torch.index_select(_e(3, device=d), 0, _e(1, device=d)),
    "index_fill_ index dtype": lambda d: _e(3, device=d).index_fill_(0, _e(1, device=d), 1.0),
    "index_put_ index dtype": lambda d: _e(3, device=d).index_put_(
        (_e(1, device=d),), _e(1, device=d)
    ),
    "masked_fill mask dtype": lambda d: _e(2, device=d).masked_fill(_e(2, device=d), 1.0),
    "masked_scatter_ mask dtype": lambda d: _e(2, device=d).masked_scatter_(
        _mask(2, d=d, dtype=torch.uint8), _e(2, device=d)
    ),
    "bucketize boundaries dim": lambda d: torch.bucketize(_e(3, device=d), _e(2, 2, device=d)),
    "searchsorted side": lambda d: torch.searchsorted(_e(3, device=d), _e(3, device=d), side="bad"),
    "multinomial integer input": lambda d: torch.multinomial(
        torch.ones(2, dtype=torch.long, device=d), 1
    ),
    "multinomial n <= 0": lambda d: torch.multinomial(torch.ones(2, device=d), 0),
    "bitwise_and on float": lambda d: torch.bitwise_and(_e(2, device=d), _e(2, device=d)),
    "complex of float and double": lambda d: torch.complex(
        _e(2, device=d), _e(2, dtype=torch.double, device=d)
    ),
    "take out= overlapping input": lambda d: (lambda s: torch.take(s, _long(3, d=d), out=s))(
        torch.rand(6, device=d)
    ),
    "masked_select out= overlapping input": lambda d: (
        lambda y: torch.masked_select(y, _mask(6, d=d), out=y)
    )(torch.rand(6, device=d)),
    "bernoulli out= expanded": lambda d: torch.bernoulli(
        torch.rand(6, device=d), out=torch.rand(1, device=d).expand(6)
    ),
}


def _raised(fn, device):
    try:
        fn(device)
    except Exception as e:  # noqa: BLE001 - any type: compared below
        return e
    return None


@pytest.mark.parametrize("name", sorted(CASES))
def test_raises_at_the_call_like_cpu(name):
    fn = CASES[name]
    cpu = _raised(fn, "cpu")
    assert cpu is not None, f"{name}: the CPU does not raise"
    N.synchronize()
    for attempt in range(2):  # the same bad call, made again, raises again
        got = _raised(fn, "neuron")
        assert got is not None, f"{name}: no error at the call (attempt {attempt})"
        assert type(got) is type(cpu), f"{name}: {type(got).__name__}: {got}"
        first_line = str(cpu).splitlines()[0]
        assert first_line in str(got), f"{name}: {got!r} vs CPU {cpu!r}"
        N.synchronize()  # nothing left pending, the stream is not poisoned
    x = torch.arange(4.0, device="neuron")
    assert (x * 2).cpu().tolist() == [0.0, 2.0, 4.0, 6.0]


def test_valid_values_after_a_rejected_call_run_normally():
    t = torch.empty(1000, device="neuron")
    with pytest.raises(RuntimeError, match=r"from=3 > to=-1"):
        t.uniform_(3, -1)
    t.uniform_(-1, 3)
    assert -1 <= t.min().item() and t.max().item() < 3


def test_data_dependent_errors_stay_deferred_once_the_signature_ran():
    # A call whose signature already ran is queued without waiting, as on CUDA:
    # an index value out of range is found while computing, at the next sync.
    x = torch.randn(5, 3, device="neuron")
    torch.index_select(x, 0, torch.tensor([0, 1], device="neuron"))
    y = torch.index_select(x, 0, torch.tensor([0, 7], device="neuron"))
    with pytest.raises(RuntimeError, match="out of range"):
        y.cpu()
    N.synchronize()


def test_kernel_warnings_reach_python_warnings():
    # As on the CPU, a kernel's warning is a Python warning raised at the call
    # (not a line on stderr from the device).
    x = torch.arange(4.0, device="neuron")
    mask = torch.tensor([1, 0, 1, 0], dtype=torch.uint8, device="neuron")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = x[mask]
    assert any(
        "indexing with dtype torch.uint8 is now deprecated" in str(w.message) for w in caught
    ), [str(w.message) for w in caught]
    assert y.cpu().tolist() == [0.0, 2.0]


def test_a_training_loop_waits_only_in_its_first_step():
    # The first call of each signature is validated (the host waits for it). Later
    # steps — changing learning rate (float scalars), changing sequence length
    # (sizes) — must not be validated again, so they run fully asynchronously.
    from torch_neuronx import _C

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Embedding(50, 32),
        torch.nn.Linear(32, 64),
        torch.nn.GELU(),
        torch.nn.Linear(64, 50),
    ).to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    counts = []
    for step in range(6):
        seq = 8 + step  # a new length every step
        x = torch.randint(0, 50, (4, seq), device="neuron")
        loss = F.cross_entropy(model(x).reshape(-1, 50), x.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        loss.item()
        counts.append(_C._validated_call_count())
    assert counts[0] == counts[-1], counts
