"""Helpers shared by the feature tests (fixtures, nothing autouse; three hooks: one
freezes what collection left alive for the garbage collector, one reports what
adaptive eager did when the session ran with it on, one fails a test that leaves a
torch mode or other process-wide dispatch state changed).

``run_py`` runs Python code in a fresh interpreter (for environment variables and
import-time behaviour); ``busy`` queues a long chain of device work on the current
stream, so that tests can tell an asynchronous call from a synchronous one without
timing anything.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence

import pytest
import torch

import torch_neuronx


def pytest_collection_finish(session: pytest.Session) -> None:
    # What collection left alive (OpInfo's op_db and its samples, every imported
    # module: ~650k objects) stays alive all session. Frozen, a full collection no
    # longer walks it: torch.neuron.graph() runs one before every capture, as
    # torch.cuda.graph does, and tests run more; each took ~1 s on this heap.
    gc.freeze()


def _dispatch_state() -> dict[str, object]:
    """The process-wide state that one test leaving changed would change every
    later op of the session (the values, so that a change can be named)."""
    return {
        "functorch transform": torch._C._functorch.peek_interpreter_stack(),
        "torch function enabled": torch._C._is_torch_function_enabled(),
        "dispatch keys included": str(torch._C._dispatch_tls_local_include_set()),
        "dispatch keys excluded": str(torch._C._dispatch_tls_local_exclude_set()),
        "grad mode": torch.is_grad_enabled(),
        "inference mode": torch.is_inference_mode_enabled(),
        "default dtype": torch.get_default_dtype(),
        "default device": torch.get_default_device(),
    }


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    # A torch function or dispatch mode left active by one test intercepts every
    # later op of the session: under vmap a mode that looks at a tensor's storage
    # meets batched tensors ("Cannot access storage of BatchedTensorImpl", the
    # error a fresh machine's run showed in test_flex_attention.py, issue 43), and
    # nothing names the test that left it. Popped here, and that test fails; so
    # does one that leaves a functorch transform, torch-function or dispatch-key
    # state, grad mode or a default changed (restored where torch lets us).
    before = (torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack())
    state = _dispatch_state()
    try:
        return (yield)
    finally:
        leaked = []
        while torch._C._len_torch_function_stack() > before[0]:
            leaked.append(type(torch._C._pop_torch_function_stack()).__name__)
        while torch._C._len_torch_dispatch_stack() > before[1]:
            leaked.append(type(torch._C._pop_torch_dispatch_stack()).__name__)
        after = _dispatch_state()
        changed = [f"{k}: {state[k]} -> {after[k]}" for k in state if after[k] != state[k]]
        if after["grad mode"] != state["grad mode"]:
            torch.set_grad_enabled(state["grad mode"])
        if after["default dtype"] != state["default dtype"]:
            torch.set_default_dtype(state["default dtype"])
        if after["default device"] != state["default device"]:
            # (cpu is the default without a device context; setting it would push one)
            cpu = state["default device"] == torch.device("cpu")
            torch.set_default_device(None if cpu else state["default device"])
        if leaked or changed:
            raise AssertionError(
                f"{item.nodeid} left torch state changed: modes {leaked}, {changed}"
            )


def pytest_terminal_summary(terminalreporter) -> None:
    # With TORCH_NEURONX_ADAPTIVE_EAGER=1 (scripts/run_tests.sh runs part of the
    # suite so): proof that sequences were adapted and replayed in this process.
    if os.environ.get("TORCH_NEURONX_ADAPTIVE_EAGER") == "1":
        stats = torch.neuron.adaptive_eager_stats()
        keys = ("sequences_adapted", "replays", "items_in_replays", "deviations")
        terminalreporter.write_line(
            "adaptive eager (this process): " + ", ".join(f"{k} {stats[k]}" for k in keys)
        )


# Variables that change the backend's behaviour: a subprocess starts without them
# unless the test sets them.
_BACKEND_ENV_PREFIXES = ("NEURON_", "TORCH_NEURONX_")


def _child_env(env: dict[str, str] | None) -> dict[str, str]:
    out = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(_BACKEND_ENV_PREFIXES) and k != "TORCH_DEVICE_BACKEND_AUTOLOAD"
    }
    out.update(env or {})
    return out


def _popen(code: str, env: dict[str, str] | None, args: Sequence[str] = ()) -> subprocess.Popen:
    # A code string that names an existing .py file runs that file (spawn needs a
    # real __main__ file); anything else runs with -c.
    if code.endswith(".py") and os.path.isfile(code):
        argv = [sys.executable, code, *args]
    else:
        argv = [sys.executable, "-c", textwrap.dedent(code), *args]
    return subprocess.Popen(
        argv,
        env=_child_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(p: subprocess.Popen, timeout: float) -> subprocess.CompletedProcess:
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"subprocess timed out after {timeout}s\n{out}\n{err}") from None
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def run_python(
    code: str, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess:
    """Runs ``code`` (source, or the path of a .py file) in a clean environment plus ``env``."""
    return _finish(_popen(code, env), timeout)


def run_python_many(
    jobs: Sequence[tuple], timeout: float = 240
) -> list[subprocess.CompletedProcess]:
    """Like run_python for several (code, env[, args]) tuples, run side by side."""
    procs = [_popen(*job) for job in jobs]
    return [_finish(p, timeout) for p in procs]


def check_ok(result: subprocess.CompletedProcess) -> str:
    """The stdout of a subprocess that must have succeeded."""
    assert result.returncode == 0, (
        f"subprocess failed (rc={result.returncode})\n"
        f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )
    return result.stdout


@pytest.fixture(scope="session")
def run_py() -> Callable[..., subprocess.CompletedProcess]:
    return run_python


@pytest.fixture(scope="session")
def run_py_many() -> Callable[..., list[subprocess.CompletedProcess]]:
    return run_python_many


# Source of the busy helper, also pasted into subprocess code.
BUSY_SRC = """
def busy(n=12, device=None):
    # A chain of n dependent 1024x1024 matmuls (tens of ms each on the host
    # CPU): the stream stays busy long after the Python calls return.
    a = torch.randn(1024, 1024, device=device or "neuron") / 32
    b = a
    for _ in range(n):
        b = b @ a
    return b
"""


_busy_ns: dict = {"torch": torch}
exec(BUSY_SRC, _busy_ns)
busy: Callable[..., torch.Tensor] = _busy_ns["busy"]


@pytest.fixture
def busy_fn() -> Callable[..., torch.Tensor]:
    return busy


@pytest.fixture(scope="session")
def busy_src() -> str:
    return BUSY_SRC


@pytest.fixture(scope="session")
def check() -> Callable[[subprocess.CompletedProcess], str]:
    return check_ok


@pytest.fixture(scope="session")
def two_devices() -> None:
    if torch.neuron.device_count() < 2:
        pytest.skip("needs two visible neuron devices")


@pytest.fixture
def adaptive_eager_defaults():
    """Each test starts with adaptive eager forgotten (sequences, counts) and ends
    with it off and its settings at their defaults (fusion on, threshold 2, 16
    sequences, 64 fruitless windows, 8 fruitless adaptations)."""
    torch.neuron.synchronize()
    torch.neuron.reset_adaptive_eager()
    yield
    torch_neuronx._C._adaptive_set_enabled(False)
    torch_neuronx._C._adaptive_set_fuse(True)
    torch_neuronx._C._adaptive_configure(2, 16, 64, 8)
    torch.neuron.synchronize()
