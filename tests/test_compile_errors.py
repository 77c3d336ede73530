"""A compiled graph that fails on the device: NEFFExecutionError and fallback execution.

TorchNeuron's ``torch_neuronx.neuron_dynamo_backend.NEFFExecutionError``; a call whose
program fails runs eagerly (``gm.forward``) with a warning unless
TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1. Programs run asynchronously, so a failure is
seen at the call only under NEURON_LAUNCH_BLOCKING=1 (a process of its own here: the
switch is read once) or when the program waits for the device itself; otherwise it is a
RuntimeError at the next synchronisation point, as any device error.
"""

import json
import os
import pickle
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from torch._dynamo.utils import counters

from torch_neuronx.compile import program
from torch_neuronx.compile.backend import _with_execution_fallback

DEV = "neuron"
FALLBACK_WARNING = "runs eagerly instead for this call"


@pytest.fixture(autouse=True)
def _reset(monkeypatch):
    monkeypatch.delenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", raising=False)
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def gather_sum(x, i):
    return (x[i] * 2).sum()


def gather_then_wait(x, i):
    # The number of rows is read on the host (an unbacked size): the program waits
    # for its first kernel in the middle of the call.
    y = x[i] * 2
    n = (y > -1e9).sum().item()
    torch._check(n >= 0)
    return y.new_ones(n) * y.sum()


def test_import_and_type():
    from torch_neuronx import neuron_dynamo_backend as nb
    from torch_neuronx.neuron_dynamo_backend import NEFFCompilationError, NEFFExecutionError

    assert "NEFFExecutionError" in nb.__all__
    assert issubclass(NEFFExecutionError, RuntimeError)
    assert issubclass(NEFFCompilationError, RuntimeError)
    from torch_neuronx.compile.backend import NEFFExecutionError as same

    assert same is NEFFExecutionError
    e = NEFFExecutionError("boom", graph="compiled graph 0/0 inference", step="k", writes_inputs=1)
    back = pickle.loads(pickle.dumps(e))
    assert (str(back), back.graph, back.step, back.writes_inputs) == (str(e), e.graph, "k", 1)


def test_async_failure_is_a_runtime_error_at_the_sync():
    from torch_neuronx.neuron_dynamo_backend import NEFFExecutionError

    cf = torch.compile(gather_sum, backend="neuron")
    x = torch.randn(10, device=DEV)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = cf(x, torch.tensor([1, 50], device=DEV))  # queued: nothing seen yet
        with pytest.raises(RuntimeError) as info:
            y.item()
    assert not isinstance(info.value, NEFFExecutionError)
    m = program._DEVICE_ERROR.match(str(info.value))
    assert m is not None, str(info.value)  # the format program.py reads
    assert m["label"].startswith("compiled graph 0/0")
    assert "cpp_fused_index_mul_sum_0 (step 1 of compiled graph" in m["detail"]
    assert "index out of bounds" in m["detail"]
    assert not [w for w in caught if FALLBACK_WARNING in str(w.message)]
    good = torch.tensor([1, 3])
    assert cf(x, good.to(DEV)).item() == pytest.approx(gather_sum(x.cpu(), good).item())


def test_eager_device_errors_have_the_format_programs_read():
    x = torch.randn(10, device=DEV)
    x[torch.tensor([1], device=DEV)]  # the first call of a signature is checked at the call
    bad = x[torch.tensor([60], device=DEV)]  # later ones fail on the device
    with pytest.raises(RuntimeError) as info:
        bad.cpu()
    m = program._DEVICE_ERROR.match(str(info.value))
    assert m is not None, str(info.value)
    assert m["label"] == "aten::index.Tensor_out" and int(m["stream"]) == 0
    assert m["detail"].startswith("index 60 is out of bounds for dimension 0 with size 10")


@pytest.fixture
def scalar_outputs():
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        yield


@pytest.mark.usefixtures("scalar_outputs")
def test_failure_seen_by_a_wait_in_the_call_raises_at_the_call(monkeypatch):
    from torch_neuronx.neuron_dynamo_backend import NEFFExecutionError

    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "1")
    cf = torch.compile(gather_then_wait, backend="neuron")
    x = torch.randn(10, device=DEV)
    with pytest.raises(NEFFExecutionError) as info:
        cf(x, torch.tensor([50], device=DEV))
    e = info.value
    assert e.graph == "compiled graph 0/0 inference"
    assert e.step == "cpp_fused_gt_index_mul_sum_0 (step 1)"
    assert not e.writes_inputs
    assert str(e).startswith(
        "neuron: compiled graph 0/0 inference failed on neuron:0 in "
        "cpp_fused_gt_index_mul_sum_0 (step 1) (work item "
    )
    assert "index out of bounds" in str(e)
    assert "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION is set" in str(e)
    assert "reported at the next synchronization point" not in str(e)  # it was not
    assert isinstance(e.__cause__, RuntimeError)
    assert "device error in compiled graph 0/0 inference" in str(e.__cause__)
    torch.neuron.synchronize()  # nothing left pending
    good = torch.tensor([4])
    torch.testing.assert_close(cf(x, good.to(DEV)).cpu(), gather_then_wait(x.cpu(), good))


@pytest.mark.usefixtures("scalar_outputs")
def test_fallback_runs_the_graph_eagerly_and_raises_what_eager_raises():
    from torch_neuronx.neuron_dynamo_backend import NEFFExecutionError

    cf = torch.compile(gather_then_wait, backend="neuron")
    x = torch.randn(10, device=DEV)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # A bad index fails eagerly too, as in eager mode: at the call (IndexError) the
        # first time eager mode sees this signature, else on the device (RuntimeError),
        # seen here by the graph's own wait.
        with pytest.raises(
            (IndexError, RuntimeError), match="index 50 is out of bounds for dimension 0"
        ) as info:
            cf(x, torch.tensor([50], device=DEV))
    assert not isinstance(info.value, NEFFExecutionError)
    assert isinstance(info.value.__context__, NEFFExecutionError)  # in the traceback too
    msgs = [str(w.message) for w in caught if FALLBACK_WARNING in str(w.message)]
    assert len(msgs) == 1, [str(w.message) for w in caught]
    assert msgs[0].startswith(
        "neuron: compiled graph 0/0 inference failed on neuron:0 in cpp_fused"
    )
    assert "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1" in msgs[0]
    assert counters["neuron"]["execution_fallbacks"] == 1
    torch.neuron.synchronize()
    good = torch.tensor([7])
    torch.testing.assert_close(cf(x, good.to(DEV)).cpu(), gather_then_wait(x.cpu(), good))
    assert counters["neuron"]["execution_fallbacks"] == 1


def test_fallback_catches_nothing_else(monkeypatch):
    # A pending error of earlier work, raised by a wait inside the call, is not the
    # program's: it stays the RuntimeError it is, with no eager re-run.
    from torch_neuronx.neuron_dynamo_backend import NEFFExecutionError

    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        cf = torch.compile(gather_then_wait, backend="neuron")
        x = torch.randn(10, device=DEV)
        cf(x, torch.tensor([1], device=DEV))
        x[torch.tensor([1], device=DEV)]
        x[torch.tensor([60], device=DEV)]  # fails later, on the device
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(RuntimeError, match=r"device error in aten::index") as info:
                cf(x, torch.tensor([2], device=DEV))
    assert not isinstance(info.value, NEFFExecutionError)
    assert "index 60 is out of bounds" in str(info.value)
    assert not [w for w in caught if FALLBACK_WARNING in str(w.message)]
    assert counters["neuron"]["execution_fallbacks"] == 0


def _failing(writes_inputs):
    from torch_neuronx.neuron_dynamo_backend import NEFFExecutionError

    def compiled(*args):
        raise NEFFExecutionError(
            "neuron: compiled graph 3/0 inference failed on neuron:0 in k (work item 9 on "
            "stream 0): a device fault",
            graph="compiled graph 3/0 inference",
            step="k",
            writes_inputs=writes_inputs,
        )

    return compiled


def test_fallback_policy(monkeypatch):
    # The policy on its own (the device failures above are bad inputs, which eager
    # mode rejects too): the eager result is returned, or the error raised with why.
    from torch_neuronx.neuron_dynamo_backend import NEFFExecutionError

    gm = torch.fx.symbolic_trace(lambda a, b: a * b + 1)
    a, b = torch.randn(4, device=DEV), torch.randn(4, device=DEV)
    with pytest.warns(UserWarning, match="compiled graph 3/0 inference runs eagerly instead"):
        out = _with_execution_fallback(_failing(False), gm)(a, b)
    torch.testing.assert_close(out.cpu(), a.cpu() * b.cpu() + 1)
    assert counters["neuron"]["execution_fallbacks"] == 1

    with pytest.raises(NEFFExecutionError, match=r"a device fault\nNot run eagerly instead: "):
        _with_execution_fallback(_failing(True), gm)(a, b)
    with pytest.raises(NEFFExecutionError, match="writes into its inputs"):
        _with_execution_fallback(_failing(True), gm)(a, b)
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "1")
    with pytest.raises(NEFFExecutionError, match="DISABLE_FALLBACK_EXECUTION is set"):
        _with_execution_fallback(_failing(False), gm)(a, b)
    assert counters["neuron"]["execution_fallbacks"] == 1


# Under NEURON_LAUNCH_BLOCKING=1, in a process of its own; each case reports a dict.
_LAUNCH_BLOCKING_JOB = textwrap.dedent(
    """
    import json, os, warnings
    import torch, torch_neuronx
    from torch._dynamo.utils import counters
    from torch_neuronx.neuron_dynamo_backend import NEFFExecutionError

    def gather_sum(x, i):
        return (x[i] * 2).sum()

    def bump_then_gather(x, i):
        x.add_(1)
        return (x[i] * 2).sum()

    def call(f, *args):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                f(*args)
                r = {"raised": None}
            except Exception as e:
                r = {"raised": type(e).__name__, "message": str(e),
                     "is_neff": isinstance(e, NEFFExecutionError),
                     "cause": repr(e.__cause__), "context": type(e.__context__).__name__}
                if isinstance(e, NEFFExecutionError):
                    r.update(graph=e.graph, step=e.step, writes_inputs=e.writes_inputs)
        r["warnings"] = [str(w.message) for w in caught if "eagerly" in str(w.message)]
        return r

    out = {}
    x = torch.randn(10, device="neuron")
    bad, good = torch.tensor([2, 50], device="neuron"), torch.tensor([2, 5], device="neuron")
    cf = torch.compile(gather_sum, backend="neuron")
    os.environ["TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"] = "1"
    out["disabled"] = call(cf, x, bad)
    os.environ["TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"] = "0"
    out["fallback"] = call(cf, x, bad)
    out["fallbacks"] = counters["neuron"]["execution_fallbacks"]
    out["good_after"] = [cf(x, good).item(), gather_sum(x, good).item()]

    cb = torch.compile(bump_then_gather, backend="neuron")
    x0 = x.cpu()
    out["writes"] = call(cb, x, bad)
    out["bumped"] = sorted({round(v, 4) for v in (x.cpu() - x0).tolist()})

    w = torch.randn(10, device="neuron", requires_grad=True)
    ct = torch.compile(gather_sum, backend="neuron")
    out["training"] = call(lambda: ct(w, bad).backward())
    ct(w, good).backward()
    out["grad"] = w.grad.cpu().tolist()
    torch.neuron.synchronize()
    print("RESULT " + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def launch_blocking():
    env = {**os.environ, "NEURON_LAUNCH_BLOCKING": "1"}
    env.pop("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", None)
    r = subprocess.run(
        [sys.executable, "-c", _LAUNCH_BLOCKING_JOB],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and lines, r.stdout[-3000:] + r.stderr[-5000:]
    return json.loads(lines[0][len("RESULT ") :])


def test_launch_blocking_without_fallback_raises_neff_execution_error(launch_blocking):
    r = launch_blocking["disabled"]
    assert r["raised"] == "NEFFExecutionError" and r["is_neff"], r
    assert r["graph"] == "compiled graph 0/0 inference"
    assert r["step"] == "cpp_fused_index_mul_sum_0"
    assert r["message"].startswith(
        "neuron: compiled graph 0/0 inference failed on neuron:0 in cpp_fused_index_mul_sum_0 "
        "(work item "
    ), r["message"]
    assert "index out of bounds" in r["message"]
    assert r["message"].endswith(
        "Not run eagerly instead: TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION is set."
    )
    assert "device error in cpp_fused_index_mul_sum_0" in r["cause"]
    assert r["warnings"] == []


def test_launch_blocking_fallback_gives_the_eager_error(launch_blocking):
    r = launch_blocking["fallback"]
    # The eager run fails as eager mode does (at the op, under launch blocking), and
    # the program's failure is its context: both are in the traceback.
    assert r["raised"] == "RuntimeError" and not r["is_neff"], r
    assert "device error in aten::index.Tensor_out" in r["message"]
    assert "index 50 is out of bounds for dimension 0 with size 10" in r["message"]
    assert r["context"] == "NEFFExecutionError"
    assert len(r["warnings"]) == 1 and "cpp_fused_index_mul_sum_0" in r["warnings"][0]
    assert launch_blocking["fallbacks"] == 1
    compiled, eager = launch_blocking["good_after"]
    assert compiled == pytest.approx(eager)


def test_launch_blocking_graph_that_writes_inputs_is_not_rerun(launch_blocking):
    r = launch_blocking["writes"]
    assert r["raised"] == "NEFFExecutionError" and r["writes_inputs"] is True, r
    assert "the graph writes into its inputs" in r["message"]
    assert r["warnings"] == []
    # x.add_(1) ran at most once: no eager re-run applied it again.
    assert set(launch_blocking["bumped"]) <= {0.0, 1.0}, launch_blocking["bumped"]


def test_launch_blocking_training_forward_falls_back(launch_blocking):
    r = launch_blocking["training"]
    assert r["raised"] == "RuntimeError" and r["context"] == "NEFFExecutionError", r
    assert "index 50 is out of bounds" in r["message"]
    assert len(r["warnings"]) == 1
    expected = [0.0] * 10
    expected[2], expected[5] = 2.0, 2.0
    assert launch_blocking["grad"] == pytest.approx(expected)
