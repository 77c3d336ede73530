"""torch.compile on neuron: Inductor's C++ kernels, each compiled graph one work item.

Results are compared with eager CPU (same inputs); how a graph runs is read from the
device trace (one item per compiled graph call, named after the graph).
"""

import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from device_trace import trace_labels
from torch._dynamo.utils import counters

DEV = "neuron"


@pytest.fixture(autouse=True)
def _reset():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def pointwise(x, y):
    return (x * y + 1).sin().sum(0)


def test_control_flow_subgraphs_compile_into_the_program():
    # torch.cond's branches and while_loop's body are subgraphs of the compiled graph:
    # their kernels are queued in its program like the rest.
    def branchy(x, p):
        return torch.cond(p, lambda x: (x * 2).sin(), lambda x: (x + 1).cos(), (x,))

    def loop(i, x):
        return torch._higher_order_ops.while_loop(
            lambda i, x: i < 5, lambda i, x: (i + 1, (x * 1.5).sin()), (i, x)
        )

    torch.neuron.reset_dynamo_metrics()
    x = torch.randn(64)
    f = torch.compile(branchy, backend="neuron", fullgraph=True)
    for p in (True, False):
        out = f(x.to(DEV), torch.tensor(p, device=DEV))
        torch.testing.assert_close(out.cpu(), branchy(x, torch.tensor(p)))
    i0 = torch.tensor(0)
    out = torch.compile(loop, backend="neuron", fullgraph=True)(i0.to(DEV), x.to(DEV))
    torch.testing.assert_close(out[1].cpu(), loop(i0, x)[1])
    assert [m.fell_back for m in torch.neuron.get_dynamo_metrics()] == [False, False]


def test_backend_is_listed():
    assert "neuron" in torch._dynamo.list_backends()


@pytest.mark.parametrize("backend", ["neuron", "inductor"])
def test_a_graph_runs_as_one_work_item(backend):
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    xd, yd = x.to(DEV), y.to(DEV)
    f = torch.compile(pointwise, backend=backend)
    torch.testing.assert_close(f(xd, yd).cpu(), pointwise(x, y))
    labels = trace_labels(lambda: [f(xd, yd) for _ in range(3)])
    assert len(labels) == 3 and all(lb.startswith("compiled graph") for lb in labels), labels


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 128),
        torch.nn.GELU(),
        torch.nn.Dropout(0.0),
        torch.nn.Linear(128, 10),
    )


def train(device, backend, steps=4, compile_step=False):
    model = mlp().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    cm = torch.compile(model, backend=backend)
    torch.manual_seed(1)
    x, t = torch.randn(32, 64), torch.randint(0, 10, (32,))
    x, t = x.to(device), t.to(device)
    step = torch.compile(opt.step, backend=backend) if compile_step else opt.step
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(cm(x), t)
        loss.backward()
        step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_training_matches_inductor_on_cpu():
    # Forward and backward compiled (AOTAutograd), AdamW, same inputs: the same
    # kernels as Inductor on CPU tensors, so the same numbers.
    ref_losses, ref_params = train("cpu", "inductor")
    losses, params = train(DEV, "neuron")
    assert losses == pytest.approx(ref_losses, rel=1e-5)
    for p, r in zip(params, ref_params, strict=True):
        torch.testing.assert_close(p, r, rtol=1e-5, atol=1e-6)


def test_forward_and_backward_each_one_work_item():
    model = mlp().to(DEV)
    cm = torch.compile(model, backend="neuron")
    x = torch.randn(32, 64, device=DEV)
    cm(x).sum().backward()  # compiles both
    labels = trace_labels(lambda: cm(x).sum().backward())
    programs = [lb for lb in labels if lb.startswith("compiled graph")]
    assert len(programs) == 2, labels
    assert programs[0].endswith("forward") and programs[1].endswith("backward"), programs


def test_compiled_optimizer_step_matches_eager():
    # Many parameters (the fused AdamW kernel takes hundreds of arguments), and
    # enough steps that the host runs ahead of the device: the step count is a CPU
    # tensor the host increments while earlier steps' kernels are still queued.
    def run(compiled):
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Linear(6, 6) for _ in range(40)]).to(DEV)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        if compiled:
            opt.step = torch.compile(opt.step, backend="neuron")
        x = torch.randn(4, 6, device=DEV)
        for _ in range(10):
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
        return [p.detach().cpu() for p in model.parameters()]

    for p, r in zip(run(True), run(False), strict=True):
        torch.testing.assert_close(p, r, rtol=1e-5, atol=1e-5)


def test_graph_breaks_compile_each_side():
    def f(x):
        y = x.cos() * 2
        if y.sum().item() > -1e9:  # data-dependent: a graph break
            y = y + 1
        return y.exp()

    x = torch.randn(5, 7)
    out = torch.compile(f, backend="neuron")(x.to(DEV))
    torch.testing.assert_close(out.cpu(), f(x))
    assert counters["neuron"]["compiled_graphs"] >= 2


def test_dynamic_shapes_one_program_for_many_sizes():
    f = torch.compile(pointwise, backend="neuron", dynamic=True)
    for n in (3, 5, 9, 17):
        x, y = torch.randn(n, 6), torch.randn(n, 6)
        torch.testing.assert_close(f(x.to(DEV), y.to(DEV)).cpu(), pointwise(x, y))
    assert counters["neuron"]["compiled_graphs"] == 1


@pytest.mark.parametrize("fallback", ["0", "1"])
def test_a_float_argument_that_turns_dynamic_is_specialized_not_a_compile_failure(
    monkeypatch, fallback
):
    # The second float makes Dynamo trace it as a symbolic float; clamp/full/** cannot
    # take it as a tensor, so AOTAutograd asks Dynamo to restart and specialize it
    # (TensorifyScalarRestartAnalysis). The backend must let that restart through, with
    # fallback off (it was a NEFFCompilationError) and on (it ran eagerly with a warning).
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", fallback)

    def f(x, s):
        return torch.clamp(x, max=s) + torch.full((6,), s, device=x.device) + x.abs() ** s

    g = torch.compile(f, backend="neuron")
    x = torch.randn(4, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "runs eagerly instead" warning
        for s in (0.5, 0.25, 0.125):
            torch.testing.assert_close(g(x.to(DEV), s).cpu(), f(x, s))
    assert not counters["neuron"]["eager_fallbacks"]
    assert counters["neuron"]["compiled_graphs"] >= 2


def test_mark_dynamic():
    f = torch.compile(pointwise, backend="neuron")
    for n in (4, 6, 8):
        x, y = torch.randn(n, 3, device=DEV), torch.randn(n, 3, device=DEV)
        torch._dynamo.mark_dynamic(x, 0)
        torch._dynamo.mark_dynamic(y, 0)
        torch.testing.assert_close(f(x, y).cpu(), pointwise(x.cpu(), y.cpu()))
    assert counters["neuron"]["compiled_graphs"] == 1


def test_input_mutation_reaches_caller():
    def f(x):
        x.add_(1)
        return x * 2

    x = torch.zeros(4, device=DEV)
    y = torch.compile(f, backend="neuron")(x)
    assert torch.equal(x.cpu(), torch.ones(4))
    assert torch.equal(y.cpu(), torch.full((4,), 2.0))


def test_fallback_ops_keep_stream_order():
    # sort and cumsum are not lowered to C++ kernels: eager ops inside the program.
    def f(x):
        s, _ = torch.sort(x * 3, dim=1)
        return torch.cumsum(s, 1).relu() + 1

    x = torch.randn(6, 9)
    out = torch.compile(f, backend="neuron")(x.to(DEV))
    torch.testing.assert_close(out.cpu(), f(x))


def test_errors_name_the_program_and_the_kernel():
    def f(x, i):
        return (x[i] * 2).sum()

    cf = torch.compile(f, backend="neuron")
    x = torch.randn(10, device=DEV)
    y = cf(x, torch.tensor([1, 3, 50], device=DEV))
    with pytest.raises(RuntimeError, match=r"compiled graph .*index out of bounds"):
        y.item()
    # The device and the program stay usable.
    good = torch.tensor([1, 2, 3])
    assert cf(x, good.to(DEV)).item() == pytest.approx(f(x.cpu(), good).item())


def test_compiled_dropout_draws_from_the_neuron_generator():
    def f(x):
        return torch.nn.functional.dropout(x, p=0.5, training=True)

    cf = torch.compile(f, backend="neuron")
    x = torch.ones(64, 64, device=DEV)
    torch.manual_seed(7)
    a = cf(x).cpu()
    torch.manual_seed(7)
    b = cf(x).cpu()
    c = cf(x).cpu()
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert set(a.unique().tolist()) <= {0.0, 2.0}


def test_no_grad_and_autocast_inside_compiled_regions():
    model = mlp().to(DEV)

    @torch.compile(backend="neuron")
    def infer(x):
        with torch.autocast(DEV, dtype=torch.bfloat16):
            return model(x)

    x = torch.randn(8, 64, device=DEV)
    with torch.no_grad():
        out = infer(x)
        with torch.autocast(DEV, dtype=torch.bfloat16):
            ref = model(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float().cpu(), ref.float().cpu(), rtol=2e-2, atol=2e-2)


def test_metrics_and_counters():
    torch.neuron.reset_dynamo_metrics()
    f = torch.compile(pointwise, backend="neuron", options={"model_name": "tiny"})
    with torch._inductor.config.patch(force_disable_caches=True):  # a cold compile: all phases
        f(torch.randn(2, 3, device=DEV), torch.randn(2, 3, device=DEV))
    (record,) = torch.neuron.get_dynamo_metrics()
    assert record.model_name == "tiny" and record.graph_name.startswith("tiny_")
    assert record.graph_node_count > 2 and record.has_collectives is False
    assert record.compile_seconds > 0 and record.fell_back is False
    # Each phase is measured (Inductor's timers) and together they fit in the call.
    phases = (
        record.torch_neuronx_fx_passes_us,
        record.torch_neuronx_lower_us,
        record.torch_neuronx_compile_us,
    )
    assert all(p > 0 for p in phases), phases
    assert sum(phases) <= record.compile_seconds * 1e6 * 1.01
    assert counters["neuron"]["compiled_graphs"] == 1
    torch.neuron.reset_dynamo_metrics()
    assert torch.neuron.get_dynamo_metrics() == []


def test_model_name_from_set_model_name():
    from torch_neuronx import neuron_dynamo_backend as nb

    torch.neuron.reset_dynamo_metrics()
    nb.set_model_name("llama")
    try:
        f = torch.compile(pointwise, backend="neuron")
        f(torch.randn(2, 3, device=DEV), torch.randn(2, 3, device=DEV))
    finally:
        nb.set_model_name(None)
    assert nb.get_model_name() is None
    (record,) = nb.get_dynamo_metrics()
    assert record.model_name == "llama"
    # create_neuron_backend binds options.
    g = torch.compile(pointwise, backend=nb.create_neuron_backend(model_name="bound"))
    g(torch.randn(2, 3, device=DEV), torch.randn(2, 3, device=DEV))
    assert nb.get_dynamo_metrics()[-1].model_name == "bound"


def test_factory_ops_in_a_graph_use_the_current_device():
    def f(x):
        return x + torch.ones(x.shape, device="neuron") * torch.arange(x.shape[-1], device="neuron")

    x = torch.randn(3, 5)
    out = torch.compile(f, backend="neuron", fullgraph=True)(x.to(DEV))
    assert out.device == torch.device(DEV, 0)
    torch.testing.assert_close(out.cpu(), x + torch.ones(3, 5) * torch.arange(5))


def test_rng_state_calls_in_compiled_code_run_between_graphs():
    # torch.testing's freeze_rng_state() (the accelerator's get/set_rng_state
    # under no_dispatch) inside a compiled function: the runtime is not traced.
    from torch.testing._internal.common_utils import freeze_rng_state

    def f(x):
        with freeze_rng_state():
            y = x * 2
        return y + 1

    x = torch.randn(4)
    out = torch.compile(f, backend="neuron")(x.to(DEV))
    torch.testing.assert_close(out.cpu(), x * 2 + 1)


class OnNeuron(torch.nn.Module):
    """A model on neuron that moves its input where its weights are."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 4)

    def forward(self, x, steps):
        x = x.to(self.lin.weight.device)
        steps.add_(1)  # a CPU buffer the caller keeps counting in
        return self.lin(x).relu(), steps * 2


def test_cpu_inputs_are_copied_to_the_device():
    torch.neuron.reset_dynamo_metrics()
    model = OnNeuron().to(DEV)
    x, steps = torch.randn(3, 6), torch.zeros(2)
    out, doubled = torch.compile(model, backend="neuron")(x, steps)
    ref = torch.nn.functional.linear(x, model.lin.weight.cpu(), model.lin.bias.cpu()).relu()
    torch.testing.assert_close(out.cpu(), ref)
    # `steps` is computed with on the CPU: it stays there, as in eager mode.
    assert steps.tolist() == [1.0, 1.0]
    assert doubled.device.type == "cpu" and doubled.tolist() == [2.0, 2.0]
    assert [r.fell_back for r in torch.neuron.get_dynamo_metrics()] == [False]
    # x, which the graph only moves to neuron, is copied before the program runs
    # (inside it, the copy would be a step of the program, not an item of its own).
    labels = trace_labels(lambda: torch.compile(model, backend="neuron")(x, steps))
    assert labels[0] == "copy_host_to_device" and labels[1].startswith("compiled graph"), labels


def test_cpu_tensors_an_op_needs_on_the_cpu_stay_there():
    # tensor_split takes its split points as a CPU tensor.
    def f(t, idx):
        return [p * 2 for p in torch.tensor_split(t, idx)]

    t, idx = torch.randn(7), torch.tensor([2, 5])
    out = torch.compile(f, backend="neuron")(t.to(DEV), idx)
    for a, b in zip(out, f(t, idx), strict=True):
        torch.testing.assert_close(a.cpu(), b)


def test_cpu_autocopy_can_be_made_an_error(monkeypatch):
    # Fallback execution is off by default (with it on, the graph runs eagerly
    # instead: tests/test_compile_cpu_inputs.py).
    monkeypatch.setenv("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", "1")
    monkeypatch.delenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", raising=False)
    model = OnNeuron().to(DEV)
    with pytest.raises(RuntimeError, match="Input tensor at index 0 is on cpu device"):
        torch.compile(model, backend="neuron")(torch.randn(3, 6), torch.zeros(2))
    # Nothing is left broken: neuron inputs still compile and run.
    out, _ = torch.compile(model, backend="neuron")(
        torch.randn(3, 6, device=DEV), torch.zeros(2, device=DEV)
    )
    assert out.shape == (3, 4)


def test_a_graph_that_fails_to_compile_raises_or_runs_eagerly_with_one_warning(monkeypatch):
    # An Inductor option that does not exist makes compile_fx fail for this graph. By
    # default it raises (the policy's cases: tests/test_compile_errors.py).
    from torch._dynamo.exc import BackendCompilerFailed

    from torch_neuronx.neuron_dynamo_backend import NEFFCompilationError

    monkeypatch.delenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", raising=False)
    f = torch.compile(pointwise, backend="neuron", options={"no_such_inductor_option": 1})
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    with pytest.raises(BackendCompilerFailed, match="no_such_inductor_option") as info:
        f(x.to(DEV), y.to(DEV))
    assert isinstance(info.value.inner_exception, NEFFCompilationError)

    torch._dynamo.reset()
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "0")
    f = torch.compile(pointwise, backend="neuron", options={"no_such_inductor_option": 1})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = f(x.to(DEV), y.to(DEV))
    torch.testing.assert_close(out.cpu(), pointwise(x, y))
    msgs = [str(w.message) for w in caught if "runs eagerly instead" in str(w.message)]
    assert len(msgs) == 1, msgs
    assert counters["neuron"]["eager_fallbacks"] == 1


def test_launch_blocking_runs_each_step_on_its_own():
    code = textwrap.dedent(
        """
        import torch, torch_neuronx
        def f(x, i):
            return (x[i] * 2).sum()
        cf = torch.compile(f, backend="neuron")
        x = torch.randn(10, device="neuron")
        cf(x, torch.tensor([1], device="neuron"))
        try:
            cf(x, torch.tensor([50], device="neuron"))  # raises at the call
        except RuntimeError as e:
            print("RAISED AT CALL", "index out of bounds" in str(e))
        """
    )
    # Inductor's cache is the session's (caching is not what is tested here): its
    # precompiled header and ISA probe are built already.
    env = {
        **os.environ,
        "NEURON_LAUNCH_BLOCKING": "1",
        # the program's own error (the default; with fallback on, the eager run's:
        # test_compile_errors.py), whatever the caller's environment says
        "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION": "1",
    }
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert "RAISED AT CALL True" in r.stdout, r.stdout + r.stderr[-3000:]


# One compiled function, run in fresh processes against a cache directory
# (TORCH_NEURONX_NEFF_CACHE_DIR). Prints the FX graph cache hits and the kernel
# libraries it built ("main.so"; the CPU's vector-ISA probe is built in every new
# cache, by design); "save" writes torch.compiler.save_cache_artifacts() to a file,
# "load" loads such a file before compiling.
_CACHE_PROBE = """
import sys, torch, torch_neuronx
import torch._inductor.cpp_builder as cpp_builder
from torch._dynamo.utils import counters
built = []
build = cpp_builder.CppBuilder.build
def counting(self, *a, **k):
    built.append(self.get_target_file_path())
    return build(self, *a, **k)
cpp_builder.CppBuilder.build = counting
mode, path = sys.argv[1:]
if mode == "load":
    info = torch.compiler.load_cache_artifacts(open(path, "rb").read())
    print("LOADED", sorted(info.artifacts))
f = torch.compile(lambda x, y: (x * y + 1).sin().sum(0), backend="neuron")
x, y = torch.randn(8, 16), torch.randn(8, 16)
out = f(x.to("neuron"), y.to("neuron")).cpu()
assert torch.allclose(out, (x * y + 1).sin().sum(0), atol=1e-5)
if mode == "save":
    data, info = torch.compiler.save_cache_artifacts()
    open(path, "wb").write(data)
print("HITS", counters["inductor"]["fxgraph_cache_hit"])
print("KERNELS_BUILT", sum("main.so" in b for b in built))
"""


@pytest.fixture(scope="module")
def cache_runs(tmp_path_factory):
    """The cache probe's output, by run: "first" compiles into an empty cache and
    saves the artifacts; then, side by side (they only read what "first" left),
    "again" in the same cache, "disabled" in it with TORCH_NEURONX_NEFF_DISABLE_CACHE=1,
    and "from_artifacts" in another empty cache after loading the artifacts. One cold
    build (Inductor's precompiled header, the ISA probe, the kernel) for all of them."""
    tmp = tmp_path_factory.mktemp("compile_cache")
    artifacts = tmp / "artifacts.bin"

    def job(mode, cache, extra=None):
        env = {**os.environ, "TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp / cache), **(extra or {})}
        env.pop("TORCHINDUCTOR_CACHE_DIR", None)
        return subprocess.Popen(
            [sys.executable, "-c", _CACHE_PROBE, mode, str(artifacts)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def finish(name, p):
        try:
            out, err = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        assert p.returncode == 0, f"{name} (rc={p.returncode}): {err[-3000:]}"
        return out

    runs = {"first": finish("first", job("save", "cache"))}
    later = {
        "again": job("run", "cache"),
        "disabled": job("run", "cache", {"TORCH_NEURONX_NEFF_DISABLE_CACHE": "1"}),
        "from_artifacts": job("load", "other"),
    }
    runs.update({name: finish(name, p) for name, p in later.items()})
    runs["cache_dir"] = tmp / "cache"
    return runs


def test_programs_are_cached_across_processes(cache_runs):
    # The second process finds the compiled graph in the cache
    # (TORCH_NEURONX_NEFF_CACHE_DIR); with TORCH_NEURONX_NEFF_DISABLE_CACHE=1 it does not.
    assert "HITS 0" in cache_runs["first"], cache_runs["first"]
    assert "HITS 1" in cache_runs["again"], cache_runs["again"]
    assert "HITS 0" in cache_runs["disabled"], cache_runs["disabled"]
    assert cache_runs["cache_dir"].is_dir()


def test_cache_artifacts_carry_the_built_programs(cache_runs):
    # A process that loads torch.compiler.save_cache_artifacts() from another one into
    # an empty cache builds no kernel library (they travel as "neuron_neff" artifacts).
    saved, loaded = cache_runs["first"], cache_runs["from_artifacts"]
    assert "KERNELS_BUILT 0" not in saved, saved
    assert "neuron_neff" in loaded and "inductor" in loaded, loaded
    assert "KERNELS_BUILT 0" in loaded, loaded


# ---- mode="reduce-overhead": compiled graphs captured once, then replayed


@pytest.fixture
def captured_calls():
    """The CapturedCalls (compiled graphs under reduce-overhead) a test creates."""
    import gc

    from torch_neuronx.compile.captured_call import CapturedCall

    gc.collect()
    before = set(map(id, CapturedCall.instances))
    return lambda: [c for c in CapturedCall.instances if id(c) not in before]


def test_reduce_overhead_replays_forward_and_backward_and_matches_eager(captured_calls):
    torch.manual_seed(0)
    ref = mlp()
    model = mlp().to(DEV)
    model.load_state_dict(ref.state_dict())
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = torch.compile(
        lambda x, y: torch.nn.functional.cross_entropy(model(x), y),
        backend="neuron",
        mode="reduce-overhead",
    )
    losses = []
    for _ in range(5):
        x, y = torch.randn(16, 64), torch.randint(0, 8, (16,))
        loss = step(x.to(DEV), y.to(DEV))
        loss.backward()
        opt.step()
        opt.zero_grad()
        loss_ref = torch.nn.functional.cross_entropy(ref(x), y)
        loss_ref.backward()
        opt_ref.step()
        opt_ref.zero_grad()
        losses.append((loss.item(), loss_ref.item()))
    for got, want in losses:
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6), losses
    calls = {c.name.split()[-1]: c for c in captured_calls()}
    assert set(calls) == {"forward", "backward"}
    # The first call warms up, the second captures and replays, the rest replay.
    assert all(c.replays == 4 and c.disabled is None for c in calls.values())
    # A replayed graph is one work item, not a program run by its wrapper.
    x, y = torch.randn(16, 64, device=DEV), torch.randint(0, 8, (16,), device=DEV)
    labels = trace_labels(lambda: step(x, y).backward())
    assert sum(lb.startswith("neuron graph") for lb in labels) == 2, labels
    assert not any(lb.startswith("compiled graph") for lb in labels), labels


def test_reduce_overhead_outputs_survive_later_replays_and_shapes_capture_apart(captured_calls):
    f = torch.compile(
        lambda x: (x * 2).sin() + 1, backend="neuron", mode="reduce-overhead", dynamic=True
    )
    xs = [torch.randn(n, 8) for n in (4, 4, 4, 6, 6, 6, 4)]
    outs = [f(x.to(DEV)) for x in xs]
    for x, o in zip(xs, outs, strict=True):
        torch.testing.assert_close(o.cpu(), (x * 2).sin() + 1)
    # One graph for every size; one capture per size (its size is an argument).
    (call,) = captured_calls()
    assert len(call.captures) == 2 and call.replays == 5


def test_reduce_overhead_runs_an_uncapturable_graph_uncaptured_with_one_warning():
    # Dropout draws from the generator at each call: it cannot be replayed.
    f = torch.compile(
        lambda x: torch.nn.functional.dropout(x, 0.5, training=True) + 1,
        backend="neuron",
        mode="reduce-overhead",
    )
    x = torch.ones(64, device=DEV)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = [f(x).cpu() for _ in range(4)]
    msgs = [str(w.message) for w in caught if "not captured" in str(w.message)]
    assert len(msgs) == 1 and "random ops" in msgs[0], msgs
    for o in outs:
        assert set(o.unique().tolist()) <= {1.0, 3.0}
    assert not all(torch.equal(outs[0], o) for o in outs[1:])  # fresh masks


def test_reduce_overhead_never_overwrites_activations_a_backward_still_needs(captured_calls):
    # Gradient accumulation: two forwards before one backward. The first forward's
    # activations (the capture's buffers) are still needed, so the second forward
    # runs uncaptured (one warning) instead of overwriting them.
    torch.manual_seed(0)
    ref = mlp()
    model = mlp().to(DEV)
    model.load_state_dict(ref.state_dict())
    step = torch.compile(
        lambda x: model(x).square().mean(), backend="neuron", mode="reduce-overhead"
    )
    for _ in range(3):  # warm-up, capture, replay
        step(torch.randn(8, 64, device=DEV)).backward()
    model.zero_grad()
    x1, x2 = torch.randn(8, 64), torch.randn(8, 64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (step(x1.to(DEV)) + step(x2.to(DEV))).backward()
    assert any("still in use" in str(w.message) for w in caught)
    (ref(x1).square().mean() + ref(x2).square().mean()).backward()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5)
    fwd = next(c for c in captured_calls() if c.name.endswith("forward"))
    assert fwd.replays >= 2 and fwd.uncaptured_calls == 1
