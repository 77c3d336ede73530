"""Op tracking as TorchNeuron users read it: get_executed_ops / get_fallback_ops /
clear_op_tracking.

After clear_op_tracking(), get_executed_ops() lists the ATen ops called on neuron
tensors, composite ones included (full, ones, clone, new_empty, linear, ...), with
their overload names; get_fallback_ops() lists the ops the host computed instead of the
device (random ops: drawn on the host, as the CPU draws them).
"""

import os
import subprocess
import sys

import pytest
import torch

import torch_neuronx

DEV = "neuron"


@pytest.fixture
def tracking():
    torch_neuronx.clear_op_tracking()
    yield
    torch_neuronx.clear_op_tracking()


def test_composite_and_kernel_ops_are_listed(tracking):
    x = torch.full((4, 4), 2.0, device=DEV)
    y = torch.ones(4, 4, device=DEV)
    z = x.clone()
    e = z.new_empty(3)
    e.resize_(5)
    torch.clamp(x, min=torch.zeros(4, 4, device=DEV), out=y)
    _ = (x + y).sum().item()
    torch.nn.functional.linear(x, y)
    ops = set(torch_neuronx.get_executed_ops())
    expected = {
        "aten::full",
        "aten::ones",
        "aten::clone",
        "aten::new_empty",
        "aten::resize_",
        "aten::_local_scalar_dense",
        "aten::copy_",
        "aten::empty.memory_format",
        "aten::clamp.Tensor_out",
        "aten::add.Tensor",
        "aten::sum",
        "aten::linear",
    }
    assert expected <= ops, sorted(expected - ops)
    assert torch_neuronx.get_fallback_ops() == []


def test_random_ops_are_the_fallbacks(tracking):
    x = torch.ones(64, 64, device=DEV)
    (x * 2).sum()
    assert torch_neuronx.get_fallback_ops() == []
    torch.randn(8, device=DEV)
    torch.nn.functional.dropout(x, 0.5)
    torch.ones(4, device=DEV).uniform_()
    fallbacks = torch_neuronx.get_fallback_ops()
    assert {"aten::normal_", "aten::bernoulli_.float", "aten::uniform_"} <= set(fallbacks)
    assert not [op for op in fallbacks if op.startswith(("aten::mul", "aten::sum"))]
    torch_neuronx.clear_op_tracking()
    assert torch_neuronx.get_fallback_ops() == []


def test_cpu_only_ops_are_not_listed(tracking):
    a = torch.ones(3)
    (a * 2).sum()
    torch.full((2,), 1.0)
    assert torch_neuronx.get_executed_ops() == []


def test_clear_empties_the_list(tracking):
    torch.ones(2, device=DEV).add_(1)
    assert torch_neuronx.get_executed_ops()
    torch_neuronx.clear_op_tracking()
    assert torch_neuronx.get_executed_ops() == []
    torch.ones(2, device=DEV).mul_(3)
    assert "aten::mul_.Tensor" in torch_neuronx.get_executed_ops()


def test_old_name_is_an_alias():
    assert torch_neuronx.clear_op_stats is torch_neuronx.clear_op_tracking


def _run(code: str, env_value: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TORCH_NEURONX_OP_TRACKING=env_value)
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )


def test_env_var_tracks_from_import():
    code = (
        "import torch, torch_neuronx\n"
        "torch.ones(2, device='neuron')\n"
        "print('aten::ones' in torch_neuronx._C._get_executed_ops())\n"
    )
    assert _run(code, "1").stdout.strip() == "True"
    # Off by default: only kernels are recorded until tracking is asked for.
    assert _run(code, "0").stdout.strip() == "False"


def test_bad_env_value_is_a_clear_error():
    r = _run("import torch_neuronx", "yes")
    assert r.returncode != 0
    assert "TORCH_NEURONX_OP_TRACKING must be 0 or 1" in r.stderr
