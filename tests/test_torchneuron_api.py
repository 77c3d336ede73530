"""TorchNeuron's names for the device API, so code written for the vendor backend runs unchanged."""

import gc
import importlib
import json

import pytest
import torch

import torch_neuronx

N = torch.neuron
MIB = 1 << 20

# torch.cuda.memory's functions that torch.neuron has too: the same objects on both modules.
MEMORY_FUNCTIONS = [
    "empty_cache",
    "get_per_process_memory_fraction",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "set_per_process_memory_fraction",
]


@pytest.fixture(autouse=True)
def _quiet_device():
    gc.collect()
    N.synchronize()
    yield
    N.set_device(0)


# --- torch_neuronx.neuron and torch.neuron.memory ---------------------------------------


def test_torch_neuronx_neuron_is_the_device_module():
    from torch_neuronx import neuron

    assert neuron is torch.neuron is torch_neuronx.neuron
    assert neuron.device_count() == torch.neuron.device_count() >= 1
    assert "neuron" in torch_neuronx.__all__


def test_import_statements_find_the_modules():
    import torch.neuron.memory

    import torch_neuronx.neuron
    import torch_neuronx.neuron.memory

    assert torch_neuronx.neuron is N
    assert torch.neuron.memory is N.memory
    assert importlib.import_module("torch.neuron.memory") is N.memory
    assert importlib.import_module("torch_neuronx.neuron.memory") is N.memory


@pytest.mark.parametrize("name", MEMORY_FUNCTIONS)
def test_memory_submodule_has_the_memory_functions(name):
    assert getattr(N.memory, name) is getattr(N, name)


def test_memory_submodule_reports_like_the_device_module():
    x = torch.empty(MIB, dtype=torch.uint8, device="neuron")
    assert N.memory.memory_allocated() == N.memory_allocated() >= MIB
    assert N.memory.memory_reserved() == N.memory_reserved()
    assert N.memory.max_memory_allocated(0) == N.max_memory_allocated("neuron:0")
    assert N.memory.memory_stats()["allocated_bytes.all.current"] == N.memory_allocated()
    del x


# --- op tracking --------------------------------------------------------------------------


def test_clear_op_tracking():
    assert "clear_op_tracking" in torch_neuronx.__all__
    (torch.ones(3, device="neuron") * 2).sum().item()
    assert any(op.startswith("aten::mul") for op in torch_neuronx.get_executed_ops())
    torch_neuronx.clear_op_tracking()
    assert torch_neuronx.get_executed_ops() == []
    assert torch_neuronx.get_fallback_ops() == []
    (torch.ones(3, device="neuron") + 1).cpu()
    ops = torch_neuronx.get_executed_ops()
    assert any(op.startswith("aten::add") for op in ops)
    assert not any(op.startswith("aten::mul") for op in ops)


def test_clear_op_stats_is_kept_as_an_alias():
    assert torch_neuronx.clear_op_stats is torch_neuronx.clear_op_tracking
    (torch.ones(2, device="neuron") - 1).cpu()
    torch_neuronx.clear_op_stats()
    assert torch_neuronx.get_executed_ops() == []


# --- memory_stats: TorchNeuron's flat keys beside CUDA's dotted ones ----------------------

FLAT_FROM_DOTTED = {
    "num_alloc_retries": "num_alloc_retries",
    "num_ooms": "num_ooms",
    "num_tensor_frees": "allocation.all.freed",
    "allocation_requests": "allocation.all.allocated",
}


def _assert_flat_matches_dotted(s):
    for name in ("allocated_bytes", "reserved_bytes", "active_bytes"):
        assert s[name] == {
            "current": s[f"{name}.all.current"],
            "peak": s[f"{name}.all.peak"],
        }, name
    for flat, dotted in FLAT_FROM_DOTTED.items():
        assert s[flat] == s[dotted], flat


def test_memory_stats_flat_keys():
    x = torch.empty(1000, device="neuron")
    s = N.memory_stats()
    _assert_flat_matches_dotted(s)
    assert s["allocated_bytes"]["current"] == N.memory_allocated() > 0
    assert s["reserved_bytes"]["current"] == N.memory_reserved()
    assert s["allocated_bytes"]["peak"] == N.max_memory_allocated()
    assert s["reserved_bytes"]["peak"] == N.max_memory_reserved()
    assert list(s) == sorted(s)  # sorted by key, as CUDA's
    del x


def test_memory_stats_flat_counts_follow_allocations_and_frees():
    s0 = N.memory_stats()
    x = torch.empty(4096, device="neuron")
    s1 = N.memory_stats()
    assert s1["allocation_requests"] == s0["allocation_requests"] + 1
    del x
    N.synchronize()
    s2 = N.memory_stats()
    assert s2["num_tensor_frees"] == s1["num_tensor_frees"] + 1
    _assert_flat_matches_dotted(s2)


def test_memory_stats_flat_keys_of_another_device(two_devices):
    x = torch.empty(MIB, dtype=torch.uint8, device="neuron:1")
    s = N.memory_stats(1)
    _assert_flat_matches_dotted(s)
    assert s["allocated_bytes"]["current"] == N.memory_allocated("neuron:1") >= MIB
    assert N.memory_stats(torch.device("neuron", 1)) == N.memory_stats(1)
    del x


def test_torch_accelerator_memory_stats_stays_cuda_shaped():
    torch.empty(8, device="neuron")
    assert "allocated_bytes" not in torch.accelerator.memory_stats()


RESET_SCRIPT = """
import json
import torch
N = torch.neuron
MIB = 1 << 20
keep = torch.ones(16 * MIB, dtype=torch.uint8, device="neuron")
tmp = torch.ones(8 * MIB, dtype=torch.uint8, device="neuron")
del tmp
try:
    torch.empty(128 * MIB, dtype=torch.uint8, device="neuron")
except torch.OutOfMemoryError:
    pass
N.synchronize()
r = {"before": N.memory_stats()}
N.reset_accumulated_memory_stats()
r["after"] = N.memory_stats()
r["sum"] = keep.sum().item()  # the device still works
print(json.dumps(r))
"""


def test_reset_accumulated_memory_stats_resets_the_counters(run_py, check):
    env = {"TORCH_NEURONX_HBM_BYTES_PER_CORE": "64MiB"}
    r = json.loads(check(run_py(RESET_SCRIPT, env=env, timeout=120)).splitlines()[-1])
    before, after = r["before"], r["after"]
    assert before["num_ooms"] >= 1
    assert before["num_tensor_frees"] >= 1
    assert before["allocation_requests"] >= 2
    for key in ("num_ooms", "num_alloc_retries", "num_tensor_frees", "allocation_requests"):
        assert after[key] == 0, key
    for key in ("allocation.all.allocated", "allocation.all.freed", "allocated_bytes.all.freed"):
        assert after[key] == 0, key
    # Current and peak values are not accumulated: they stay.
    for name in ("allocated_bytes", "reserved_bytes", "active_bytes"):
        assert after[name] == before[name], name
    assert after["allocated_bytes"]["current"] >= 16 * MIB
    assert r["sum"] == 16 * MIB


# --- amp, initialisation, device names ----------------------------------------------------


def test_get_amp_supported_dtype():
    assert N.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch_neuronx.get_amp_supported_dtype is N.get_amp_supported_dtype
    for dtype in N.get_amp_supported_dtype():
        with torch.autocast("neuron", dtype=dtype):
            x = torch.ones(4, 4, device="neuron")
            assert (x @ x).dtype == dtype


def test_is_initialized_and_init_in_a_fresh_process(run_py, check):
    code = """
import json
import torch
N = torch.neuron
r = [N.is_initialized()]
N.init()
r.append(N.is_initialized())
N.init()  # a second call is harmless
r.append(N.is_initialized())
r.append(torch.ones(2, device="neuron").sum().item())
print(json.dumps(r))
"""
    assert json.loads(check(run_py(code)).splitlines()[-1]) == [False, True, True, 2.0]


def test_is_initialized_after_device_use():
    torch.ones(1, device="neuron").cpu()
    assert N.is_initialized() is True
    N.init()
    assert N.is_initialized() is True


@pytest.mark.parametrize(
    "device",
    [None, 0, "neuron", "neuron:0", torch.device("neuron"), torch.device("neuron", 0)],
    ids=["none", "int", "str", "str-index", "torch.device", "torch.device-index"],
)
def test_get_device_name_forms(device):
    # TorchNeuron's: the device string as the name, the platform in the properties.
    assert N.get_device_name(device) == "neuron:0"
    assert N.get_device_properties(device).name == "trn2"


@pytest.mark.parametrize(
    "device", [1, "neuron:1", torch.device("neuron", 1)], ids=["int", "str", "torch.device"]
)
def test_get_device_name_of_device_1(two_devices, device):
    assert N.get_device_name(device) == "neuron:1"
    assert N.get_device_properties(device) == N.get_device_properties(1)


def test_get_device_name_follows_the_current_device(two_devices):
    N.set_device(1)
    assert N.get_device_properties() == N.get_device_properties(1)
    assert N.get_device_properties("neuron") == N.get_device_properties(1)
