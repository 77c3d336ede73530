"""Install and import: `import torch` autoloads the backend; the runtime starts lazily."""

import json


def test_import_torch_alone_gives_neuron(run_py, check):
    out = check(
        run_py(
            """
            import json, sys
            import torch
            t = torch.ones(3, device="neuron") * torch.ones(3, device="neuron")
            print(json.dumps({
                "has_module": hasattr(torch, "neuron"),
                "loaded": "torch_neuronx" in sys.modules,
                "backend": torch._C._get_privateuse1_backend_name(),
                "device": str(t.device),
                "values": t.cpu().tolist(),
                "same_module": torch.get_device_module("neuron") is torch.neuron,
            }))
            """
        )
    )
    r = json.loads(out.splitlines()[-1])
    assert r == {
        "has_module": True,
        "loaded": True,
        "backend": "neuron",
        "device": "neuron:0",
        "values": [1.0, 1.0, 1.0],
        "same_module": True,
    }


def test_autoload_disabled_then_explicit_import(run_py, check):
    out = check(
        run_py(
            """
            import json, sys
            import torch
            before = {
                "has_module": hasattr(torch, "neuron"),
                "loaded": "torch_neuronx" in sys.modules,
            }
            try:
                torch.device("neuron")
                before["device_ok"] = True
            except RuntimeError:
                before["device_ok"] = False
            import torch_neuronx
            t = torch.arange(4, device="neuron") + torch.arange(4, device="neuron")
            after = {
                "has_module": hasattr(torch, "neuron"),
                "is_pkg": torch.neuron is torch_neuronx.neuron,
                "values": t.cpu().tolist(),
            }
            print(json.dumps({"before": before, "after": after}))
            """,
            env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
        )
    )
    r = json.loads(out.splitlines()[-1])
    assert r["before"] == {"has_module": False, "loaded": False, "device_ok": False}
    assert r["after"] == {"has_module": True, "is_pkg": True, "values": [0, 2, 4, 6]}


def test_import_torch_neuronx_first_with_autoload_on(run_py, check):
    # torch's autoloading calls back into torch_neuronx while it is still
    # being imported; that must not fail.
    out = check(
        run_py(
            """
            import torch_neuronx
            import torch
            print((torch.ones(3, device="neuron") * 2).cpu().tolist())
            """
        )
    )
    assert out.splitlines()[-1] == "[2.0, 2.0, 2.0]"


def test_runtime_not_initialised_at_import(run_py, check):
    out = check(
        run_py(
            """
            import json
            import torch
            import torch_neuronx
            C = torch_neuronx._C
            steps = {"import": C._is_initialized()}
            # Queries that need no device (as on CUDA) keep the runtime asleep.
            torch.neuron.device_count()
            torch.neuron.is_available()
            torch.neuron.memory_allocated()
            torch.device("neuron:1")
            steps["queries"] = C._is_initialized()
            steps["is_initialized_api"] = torch.neuron.is_initialized()
            x = torch.ones(2, device="neuron")
            steps["first_tensor"] = C._is_initialized()
            steps["is_initialized_api_after"] = torch.neuron.is_initialized()
            steps["sum"] = x.sum().item()
            print(json.dumps(steps))
            """
        )
    )
    r = json.loads(out.splitlines()[-1])
    assert r == {
        "import": False,
        "queries": False,
        "is_initialized_api": False,
        "first_tensor": True,
        "is_initialized_api_after": True,
        "sum": 2.0,
    }
