"""A compiled graph that fails on the device: NEFFExecutionError and fallback execution.

TorchNeuron's ``torch_neuronx.neuron_dynamo_backend.NEFFExecutionError``: raised by
default (TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION defaults to 1, as TorchNeuron's); with
fallback execution on (the variable 0, or ``options={"fallback_execution": True}``,
which overrides it either way) a call whose program fails runs eagerly (``gm.forward``)
with a warning. The same policy decides a graph that fails to compile
(NEFFCompilationError, or an eager run). Programs run asynchronously, so a failure is
seen at the call only under NEURON_LAUNCH_BLOCKING=1 (a process of its own here: the
switch is read once) or when the program waits for the device itself; otherwise it is a
``torch.neuron.DeviceError`` at the next synchronisation point, as any device error.
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

from torch_neuronx.compile.backend import _with_execution_fallback, fallback_policy

DEV = "neuron"
FALLBACK_WARNING = "runs eagerly instead for this call"
FALLBACK_ENV = "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"
TURN_ON = (
    'set TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0 or pass options={"fallback_execution": True}'
)


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


def test_async_failure_is_a_device_error_at_the_sync():
    from torch_neuronx.neuron_dynamo_backend import NEFFExecutionError

    cf = torch.compile(gather_sum, backend="neuron")
    x = torch.randn(10, device=DEV)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = cf(x, torch.tensor([1, 50], device=DEV))  # queued: nothing seen yet
        with pytest.raises(torch.neuron.DeviceError) as info:
            y.item()
    e = info.value
    assert isinstance(e, torch.AcceleratorError) and not isinstance(e, NEFFExecutionError)
    # The program is the work item; the step inside it failed.
    assert e.op.startswith("compiled graph 0/0") and (e.device, e.stream) == (0, 0)
    assert (e.step, e.step_index) == ("cpp_fused_index_mul_sum_0", 1)
    assert "index out of bounds" in e.detail
    assert str(e).startswith(
        f"neuron:0: device error in {e.op} (work item {e.work_item} on stream 0): "
        f"cpp_fused_index_mul_sum_0 (step 1 of {e.op}): {e.detail}"
    ), str(e)
    assert not [w for w in caught if FALLBACK_WARNING in str(w.message)]
    good = torch.tensor([1, 3])
    assert cf(x, good.to(DEV)).item() == pytest.approx(gather_sum(x.cpu(), good).item())


def test_eager_device_errors_carry_their_fields():
    x = torch.randn(10, device=DEV)
    x[torch.tensor([1], device=DEV)]  # the first call of a signature is checked at the call
    bad = x[torch.tensor([60], device=DEV)]  # later ones fail on the device
    with pytest.raises(torch.neuron.DeviceError) as info:
        bad.cpu()
    e = info.value
    assert (e.op, e.device, e.stream, e.step, e.step_index) == (
        "aten::index.Tensor_out",
        0,
        0,
        None,
        None,
    )
    assert e.detail.startswith("index 60 is out of bounds for dimension 0 with size 10")
    assert str(e).startswith(
        f"neuron:0: device error in aten::index.Tensor_out (work item {e.work_item} on "
        f"stream 0): {e.detail}"
    ), str(e)


@pytest.fixture
def scalar_outputs():
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        yield


@pytest.mark.usefixtures("scalar_outputs")
def test_failure_seen_by_a_wait_in_the_call_raises_at_the_call():
    # The default: no fallback execution (the variable is unset here).
    from torch_neuronx.neuron_dynamo_backend import NEFFExecutionError

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
    assert str(e).endswith(
        "\nNot run eagerly instead: fallback execution is off "
        "(TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION defaults to 1); to run a failed call "
        f"eagerly, {TURN_ON}."
    ), str(e)
    assert "reported at the next synchronization point" not in str(e)  # it was not
    assert isinstance(e.__cause__, torch.neuron.DeviceError)
    assert e.__cause__.op == "compiled graph 0/0 inference"
    assert "device error in compiled graph 0/0 inference" in str(e.__cause__)
    torch.neuron.synchronize()  # nothing left pending
    good = torch.tensor([4])
    torch.testing.assert_close(cf(x, good.to(DEV)).cpu(), gather_then_wait(x.cpu(), good))


@pytest.mark.usefixtures("scalar_outputs")
def test_fallback_runs_the_graph_eagerly_and_raises_what_eager_raises(monkeypatch):
    from torch_neuronx.neuron_dynamo_backend import NEFFExecutionError

    monkeypatch.setenv(FALLBACK_ENV, "0")
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
    assert msgs[0].endswith(
        "(fallback execution is on: TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0; to raise "
        "NEFFExecutionError, unset TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION (or set it to 1) "
        'or pass options={"fallback_execution": False})'
    ), msgs[0]
    assert counters["neuron"]["execution_fallbacks"] == 1
    torch.neuron.synchronize()
    good = torch.tensor([7])
    torch.testing.assert_close(cf(x, good.to(DEV)).cpu(), gather_then_wait(x.cpu(), good))
    assert counters["neuron"]["execution_fallbacks"] == 1


def test_fallback_catches_nothing_else(monkeypatch):
    # A pending error of earlier work, raised by a wait inside the call, is not the
    # program's: it stays the DeviceError it is, with no eager re-run.
    from torch_neuronx.neuron_dynamo_backend import NEFFExecutionError

    monkeypatch.setenv(FALLBACK_ENV, "0")

    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        cf = torch.compile(gather_then_wait, backend="neuron")
        x = torch.randn(10, device=DEV)
        cf(x, torch.tensor([1], device=DEV))
        x[torch.tensor([1], device=DEV)]
        x[torch.tensor([60], device=DEV)]  # fails later, on the device
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(
                torch.neuron.DeviceError, match=r"device error in aten::index"
            ) as info:
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
    on = fallback_policy({"fallback_execution": True})
    with pytest.warns(UserWarning, match="compiled graph 3/0 inference runs eagerly instead"):
        out = _with_execution_fallback(_failing(False), gm, on)(a, b)
    torch.testing.assert_close(out.cpu(), a.cpu() * b.cpu() + 1)
    assert counters["neuron"]["execution_fallbacks"] == 1

    with pytest.raises(NEFFExecutionError, match=r"a device fault\nNot run eagerly instead: "):
        _with_execution_fallback(_failing(True), gm, on)(a, b)
    with pytest.raises(NEFFExecutionError, match="writes into its inputs"):
        _with_execution_fallback(_failing(True), gm, on)(a, b)
    off = fallback_policy({})  # the default
    with pytest.raises(NEFFExecutionError, match=r"fallback execution is off \(TORCH_NEURONX"):
        _with_execution_fallback(_failing(False), gm, off)(a, b)
    off = fallback_policy({"fallback_execution": False})
    with pytest.raises(NEFFExecutionError) as info:
        _with_execution_fallback(_failing(False), gm, off)(a, b)
    assert str(info.value).endswith(
        'fallback execution is off (options={"fallback_execution": False}); to run a failed '
        'call eagerly, pass options={"fallback_execution": True}.'
    )
    assert counters["neuron"]["execution_fallbacks"] == 1


# A graph that fails to compile: an Inductor option that does not exist makes
# compile_fx fail for it (before any code is generated).
BROKEN = {"no_such_inductor_option": 1}


def pointwise(x, y):
    return (x * y + 1).sin()


def _inputs():
    return torch.randn(3, 4, device=DEV), torch.randn(3, 4, device=DEV)


def _compile_error(f, *args):
    """What a backend error reaches the caller as: Dynamo's BackendCompilerFailed,
    with the backend's exception as ``inner_exception``."""
    from torch._dynamo.exc import BackendCompilerFailed

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(BackendCompilerFailed) as info:
            f(*args)
    assert not [w for w in caught if "eagerly" in str(w.message)]
    return info.value.inner_exception


def _runs_eagerly_with_one_warning(f, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = f(*args)
    torch.testing.assert_close(out.cpu(), pointwise(*(a.cpu() for a in args)))
    msgs = [str(w.message) for w in caught if "could not be compiled" in str(w.message)]
    assert len(msgs) == 1, [str(w.message) for w in caught]
    assert counters["neuron"]["eager_fallbacks"] == 1 and not counters["neuron"]["compiled_graphs"]
    return msgs[0]


def test_a_graph_that_fails_to_compile_raises_by_default():
    from torch_neuronx.neuron_dynamo_backend import NEFFCompilationError

    e = _compile_error(torch.compile(pointwise, backend="neuron", options=BROKEN), *_inputs())
    assert isinstance(e, NEFFCompilationError), repr(e)
    assert str(e).startswith("neuron: model_0_graph_0 could not be compiled: AttributeError: ")
    assert "no_such_inductor_option" in str(e)
    assert str(e).endswith(
        "\nFallback execution is off (TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION defaults to 1); "
        f"to run the graph eagerly instead, {TURN_ON}"
    ), str(e)
    assert isinstance(e.__cause__, AttributeError)
    assert not counters["neuron"]["eager_fallbacks"]


@pytest.mark.parametrize("value", ["0", "false", "FALSE", " False "])
def test_variable_0_runs_a_graph_that_fails_to_compile_eagerly(monkeypatch, value):
    monkeypatch.setenv(FALLBACK_ENV, value)
    f = torch.compile(pointwise, backend="neuron", options=BROKEN)
    msg = _runs_eagerly_with_one_warning(f, *_inputs())
    assert msg.startswith("neuron: model_0_graph_0 could not be compiled and runs eagerly instead")
    assert f"fallback execution is on ({FALLBACK_ENV}={value})" in msg
    assert [m.fell_back for m in torch.neuron.get_dynamo_metrics()][-1] is True


@pytest.mark.parametrize("value", ["1", "true", "True"])
def test_variable_1_raises(monkeypatch, value):
    from torch_neuronx.neuron_dynamo_backend import NEFFCompilationError

    monkeypatch.setenv(FALLBACK_ENV, value)
    e = _compile_error(torch.compile(pointwise, backend="neuron", options=BROKEN), *_inputs())
    assert isinstance(e, NEFFCompilationError)
    assert f"Fallback execution is off ({FALLBACK_ENV}={value}); " in str(e)


@pytest.mark.parametrize("env", [None, "1"])
def test_the_option_turns_fallback_on_whatever_the_variable_says(monkeypatch, env):
    if env is not None:
        monkeypatch.setenv(FALLBACK_ENV, env)
    options = {**BROKEN, "fallback_execution": True}
    msg = _runs_eagerly_with_one_warning(
        torch.compile(pointwise, backend="neuron", options=options), *_inputs()
    )
    assert msg.endswith(
        'fallback execution is on (options={"fallback_execution": True}); to raise instead, '
        'pass options={"fallback_execution": False}'
    ), msg


def test_the_option_turns_fallback_off_whatever_the_variable_says(monkeypatch):
    from torch_neuronx.neuron_dynamo_backend import NEFFCompilationError

    monkeypatch.setenv(FALLBACK_ENV, "0")
    options = {**BROKEN, "fallback_execution": False}
    e = _compile_error(torch.compile(pointwise, backend="neuron", options=options), *_inputs())
    assert isinstance(e, NEFFCompilationError)
    assert str(e).endswith(
        'Fallback execution is off (options={"fallback_execution": False}); to run the graph '
        'eagerly instead, pass options={"fallback_execution": True}'
    ), str(e)


def test_the_option_is_not_passed_to_inductor():
    # Inductor would reject an option it does not know: the graph compiles.
    from torch_neuronx.neuron_dynamo_backend import create_neuron_backend

    x, y = _inputs()
    for backend, options in (
        ("neuron", {"fallback_execution": True}),
        (create_neuron_backend(fallback_execution=False), None),
    ):
        torch._dynamo.reset()
        f = torch.compile(pointwise, backend=backend, options=options)
        torch.testing.assert_close(f(x, y).cpu(), pointwise(x.cpu(), y.cpu()))
    assert counters["neuron"]["compiled_graphs"] == 2
    assert not counters["neuron"]["eager_fallbacks"]


@pytest.mark.parametrize("value", ["", "yes", "2", "off"])
def test_a_malformed_variable_is_an_error_at_the_first_compile(monkeypatch, value):
    monkeypatch.setenv(FALLBACK_ENV, value)
    # A graph that would compile: the value is checked before anything fails.
    e = _compile_error(torch.compile(pointwise, backend="neuron"), *_inputs())
    assert isinstance(e, ValueError), repr(e)
    assert str(e).startswith(f"{FALLBACK_ENV}={value!r} is not a valid value: use 1 or true")
    assert not counters["neuron"]["compiled_graphs"]
    # The option decides without reading the variable.
    f = torch.compile(pointwise, backend="neuron", options={"fallback_execution": False})
    x, y = _inputs()
    torch.testing.assert_close(f(x, y).cpu(), pointwise(x.cpu(), y.cpu()))


def test_fallback_policy_values(monkeypatch):
    assert not fallback_policy({}).allowed
    for value, allowed in (("1", False), ("TRUE", False), ("0", True), ("False", True)):
        monkeypatch.setenv(FALLBACK_ENV, value)
        assert fallback_policy({}).allowed is allowed
        assert fallback_policy({"fallback_execution": not allowed}).allowed is (not allowed)
    assert fallback_policy({"fallback_execution": None}).allowed  # None: not given
    with pytest.raises(ValueError, match=r'options\["fallback_execution"\] must be True or False'):
        fallback_policy({"fallback_execution": "yes"})


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
    # The policy is read when a graph is compiled (its first call): the variable is
    # unset here, so the default, no fallback.
    cf = torch.compile(gather_sum, backend="neuron")
    out["disabled"] = call(cf, x, bad)
    os.environ["TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"] = "0"  # for graphs compiled now on
    out["disabled_after_env_change"] = call(cf, x, bad)  # compiled already: still raises
    cf = torch.compile(lambda x, i: gather_sum(x, i), backend="neuron")
    out["fallback"] = call(cf, x, bad)
    out["fallbacks"] = counters["neuron"]["execution_fallbacks"]
    out["good_after"] = [cf(x, good).item(), gather_sum(x, good).item()]
    co = torch.compile(lambda x, i: gather_sum(x, i) + 0, backend="neuron",
                       options={"fallback_execution": False})
    out["option_off"] = call(co, x, bad)

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
        "Not run eagerly instead: fallback execution is off "
        "(TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION defaults to 1); to run a failed call "
        f"eagerly, {TURN_ON}."
    ), r["message"]
    assert "device error in cpp_fused_index_mul_sum_0" in r["cause"]
    assert r["warnings"] == []
    # A graph keeps the policy it was compiled with.
    r = launch_blocking["disabled_after_env_change"]
    assert r["raised"] == "NEFFExecutionError" and r["warnings"] == [], r


def test_launch_blocking_option_overrides_the_variable(launch_blocking):
    r = launch_blocking["option_off"]  # compiled with the variable 0
    assert r["raised"] == "NEFFExecutionError" and r["warnings"] == [], r
    assert 'fallback execution is off (options={"fallback_execution": False})' in r["message"]


def test_launch_blocking_fallback_gives_the_eager_error(launch_blocking):
    r = launch_blocking["fallback"]
    # The eager run fails as eager mode does (at the op, under launch blocking), and
    # the program's failure is its context: both are in the traceback.
    assert r["raised"] == "DeviceError" and not r["is_neff"], r
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
    assert r["raised"] == "DeviceError" and r["context"] == "NEFFExecutionError", r
    assert "index 50 is out of bounds" in r["message"]
    assert len(r["warnings"]) == 1
    expected = [0.0] * 10
    expected[2], expected[5] = 2.0, 2.0
    assert launch_blocking["grad"] == pytest.approx(expected)
