"""safetensors from and to neuron: save_file / load_file / save_model / load_model.

safetensors' own device parser knows no out-of-tree devices;
torch_neuronx.adapters.safetensors_support teaches ``load_file`` (and
``load_model``) the neuron device names.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

st = pytest.importorskip("safetensors.torch")
from safetensors import safe_open  # noqa: E402

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float8_e4m3fn,
]


def sample(dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    if dtype == torch.bool:
        return torch.rand(4, 6, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(4, 6, generator=g) * 3).to(dtype)
    return torch.randint(0, 100, (4, 6), generator=g).to(dtype)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.cpu(), b.cpu()
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    )


@pytest.fixture
def tensors() -> dict[str, torch.Tensor]:
    return {str(dt).removeprefix("torch."): sample(dt) for dt in DTYPES}


def test_save_from_neuron_is_the_same_file_as_from_cpu(tmp_path, tensors):
    st.save_file(tensors, tmp_path / "cpu.safetensors")
    st.save_file({k: v.to("neuron") for k, v in tensors.items()}, tmp_path / "dev.safetensors")
    assert (tmp_path / "cpu.safetensors").read_bytes() == (
        tmp_path / "dev.safetensors"
    ).read_bytes()
    assert st.save({k: v.to("neuron") for k, v in tensors.items()}) == st.save(tensors)


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        ("neuron", "neuron:0"),
        ("neuron:0", "neuron:0"),
        (torch.device("neuron"), "neuron:0"),
        (0, "neuron:0"),  # an index: torch resolves it to the current accelerator
        ("cpu", "cpu"),
    ],
    ids=["neuron", "neuron:0", "torch.device", "index", "cpu"],
)
def test_load_file_onto_device(tmp_path, tensors, device, expected):
    path = tmp_path / "t.safetensors"
    st.save_file({k: v.to("neuron") for k, v in tensors.items()}, path, metadata={"k": "v"})
    loaded = st.load_file(path, device=device)
    assert loaded.keys() == tensors.keys()
    for k, v in tensors.items():
        assert loaded[k].device == torch.device(expected), k
        assert same(loaded[k], v), k


def test_load_file_onto_second_and_current_device(tmp_path, tensors, two_devices):
    path = tmp_path / "t.safetensors"
    st.save_file(tensors, path)
    loaded = st.load_file(path, device="neuron:1")
    assert all(t.device == torch.device("neuron", 1) for t in loaded.values())
    assert all(same(loaded[k], v) for k, v in tensors.items())
    with torch.neuron.device(1):
        loaded = st.load_file(path, device="neuron")
    assert all(t.device == torch.device("neuron", 1) for t in loaded.values())
    with safe_open(path, framework="pt", device=1) as f:
        t = f.get_tensor("float32")
        assert t.device == torch.device("neuron", 1) and same(t, tensors["float32"])


def test_load_file_to_missing_device_is_a_clear_error(tmp_path, tensors):
    path = tmp_path / "t.safetensors"
    st.save_file(tensors, path)
    count = torch.neuron.device_count()
    with pytest.raises(RuntimeError, match=rf"neuron:9: torch.neuron.device_count\(\) is {count}"):
        st.load_file(path, device="neuron:9")
    assert st.load_file(path, device="neuron")["int64"].device.type == "neuron"


def test_other_devices_still_go_to_safetensors(tmp_path, tensors):
    path = tmp_path / "t.safetensors"
    st.save_file(tensors, path)
    with pytest.raises(Exception, match="device neuronx is invalid"):
        st.load_file(path, device="neuronx")


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 10, bias=False)
        self.head.weight = self.emb.weight


def test_save_model_and_load_model_with_tied_weights(tmp_path):
    torch.manual_seed(0)
    src = Tied().to("neuron")
    path = tmp_path / "m.safetensors"
    st.save_model(src, path)
    torch.manual_seed(1)
    dst = Tied().to("neuron")
    missing, unexpected = st.load_model(dst, path, device="neuron")
    assert not missing and not unexpected
    for (k, a), b in zip(src.state_dict().items(), dst.state_dict().values(), strict=True):
        assert b.device.type == "neuron" and same(a, b), k
    assert dst.head.weight is dst.emb.weight
    # A model on the CPU loads the neuron-saved file too, and the other way round.
    cpu = Tied()
    st.load_model(cpu, path)
    assert same(cpu.emb.weight, src.emb.weight)


def test_shim_applies_when_safetensors_was_imported_first(run_py, check):
    out = check(
        run_py(
            """
            import os, tempfile
            import torch
            import safetensors.torch as st
            import torch_neuronx  # explicit load, after safetensors
            p = os.path.join(tempfile.mkdtemp(), "a.safetensors")
            st.save_file({"a": torch.arange(3.0)}, p)
            print(st.load_file(p, device="neuron")["a"].device)
            """,
            env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
        )
    )
    assert out.strip() == "neuron:0"
