"""Op tracking as TorchNeuron users read it: get_executed_ops / get_fallback_ops /
clear_op_tracking.

After clear_op_tracking(), get_executed_ops() lists the ATen ops called on neuron
tensors, composite ones included (full, ones, clone, new_empty, linear, ...), with
their overload names, except views and calls with nothing to compute; get_fallback_ops()
lists the ops the host computes instead of the device (the linear-algebra
decompositions TorchNeuron runs on the CPU). Random ops are executed device ops.
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


def test_random_ops_are_executed_not_fallbacks(tracking):
    # TorchNeuron's rule: random ops are device ops whose numbers the host draws.
    x = torch.ones(64, 64, device=DEV, requires_grad=True)
    torch.randn(8, device=DEV)
    torch.nn.functional.dropout(x, 0.5).sum().backward()
    torch.ones(4, device=DEV).uniform_()
    executed = set(torch_neuronx.get_executed_ops())
    assert {"aten::randn", "aten::native_dropout", "aten::native_dropout_backward"} <= executed
    assert "aten::uniform_" in executed
    assert torch_neuronx.get_fallback_ops() == []


def test_views_and_calls_with_nothing_to_compute_are_not_executed(tracking):
    x = torch.randn(4, 4, device=DEV)
    none = torch.zeros(4, 4, dtype=torch.bool, device=DEV)
    torch_neuronx.clear_op_tracking()
    x.unsqueeze(0), x.view(16), x.expand(2, 4, 4), x.transpose(0, 1), x.t(), x[1:]
    assert torch_neuronx.get_executed_ops() == []
    selected = x[none]  # an all-false mask selects nothing
    alone = torch.cat([x])  # cat of one tensor
    assert torch_neuronx.get_executed_ops() == []
    assert selected.numel() == 0 and torch.equal(alone.cpu(), x.cpu())
    torch.cat([x, x])
    x[~none]
    executed = set(torch_neuronx.get_executed_ops())
    assert {"aten::cat", "aten::index.Tensor"} <= executed


def test_host_computed_decompositions_are_fallbacks(tracking):
    a = torch.randn(5, 5, device=DEV)
    spd = a @ a.T + 5 * torch.eye(5, device=DEV)
    torch.linalg.qr(a)
    torch.linalg.svd(a)
    torch.linalg.eigh(spd)
    torch.linalg.cholesky(spd)
    torch.linalg.inv(spd)
    torch.linalg.lu_factor(a)
    torch.linalg.det(a)
    torch.linalg.slogdet(a)
    want = {
        "aten::linalg_qr",
        "aten::_linalg_svd",
        "aten::_linalg_eigh",
        "aten::linalg_cholesky_ex",
        "aten::linalg_inv_ex",
        "aten::linalg_lu_factor_ex",
        "aten::_linalg_det",
        "aten::_linalg_slogdet",
    }
    assert want <= set(torch_neuronx.get_fallback_ops())
    assert not want & set(torch_neuronx.get_executed_ops())
    # The results are still right (the CPU computes them).
    torch.testing.assert_close(torch.linalg.det(a).cpu(), torch.linalg.det(a.cpu()))


def test_fused_ops_are_reported_under_their_name(tracking):
    x = torch.randn(4, 8, device=DEV)
    torch.nn.functional.rms_norm(x, (8,), torch.ones(8, device=DEV))
    assert "aten::_fused_rms_norm" in torch_neuronx.get_executed_ops()


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
