"""Checkpoints: torch.save / torch.load of neuron tensors, modules, optimizers, RNG state.

torch.serialization tags neuron storages "neuron:<i>" (the renamed PrivateUse1
backend) and restores them through torch.neuron; these tests pin down what a
training script relies on, compared with the same objects on the CPU.
"""

from __future__ import annotations

import copy
import io
import pickle
from pathlib import Path

import pytest
import torch
from torch import nn

N = torch.neuron

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.complex64,
    torch.complex128,
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
]


def roundtrip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


def sample(dtype: torch.dtype, shape=(5, 7)) -> torch.Tensor:
    """A CPU tensor of `dtype` with varied values (not all equal, some zeros)."""
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, dtype=dtype, generator=g)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 4).to(dtype)
    return torch.randint(0, 100, shape, generator=g).to(dtype)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality on the CPU (NaNs included), for every dtype."""
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return a.reshape(-1).view(torch.uint8).equal(b.reshape(-1).view(torch.uint8))


# --- tensors -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tensor_roundtrip_every_dtype(dtype):
    cpu = sample(dtype)
    loaded = roundtrip(cpu.to("neuron"))
    assert loaded.device == torch.device("neuron", 0)
    assert loaded.dtype == dtype
    assert same(loaded, cpu)


def test_views_keep_sharing_storage_and_layout():
    base = torch.randn(6, 8, device="neuron")
    views = {"base": base, "rows": base[2:], "t": base.t(), "strided": base[:, ::3]}
    loaded = roundtrip(views)
    for name, v in views.items():
        assert loaded[name].stride() == v.stride(), name
        assert loaded[name].storage_offset() == v.storage_offset(), name
        assert same(loaded[name], v), name
    ptrs = {v.untyped_storage().data_ptr() for v in loaded.values()}
    assert len(ptrs) == 1  # one storage, as saved
    assert not loaded["t"].is_contiguous()
    # Writes through one view show in the others, as before saving.
    loaded["base"].fill_(3.0)
    assert loaded["t"].cpu().eq(3.0).all()
    assert base.cpu().ne(3.0).any()  # the original is untouched


def test_tensor_on_second_device_comes_back_there(two_devices):
    x = torch.arange(10.0, device="neuron:1")
    loaded = roundtrip(x)
    assert loaded.device == torch.device("neuron", 1)
    assert same(loaded, x)


def test_empty_tensor_and_parameter():
    loaded = roundtrip(
        {"e": torch.empty(0, 3, device="neuron"), "p": nn.Parameter(torch.ones(2, device="neuron"))}
    )
    assert loaded["e"].shape == (0, 3) and loaded["e"].device.type == "neuron"
    assert isinstance(loaded["p"], nn.Parameter) and loaded["p"].requires_grad
    assert loaded["p"].device.type == "neuron"


def test_legacy_format_and_mmap(tmp_path):
    x = torch.randn(4, 4, device="neuron")
    path = tmp_path / "legacy.pt"
    torch.save({"x": x, "v": x[1:]}, path, _use_new_zipfile_serialization=False)
    loaded = torch.load(path)
    assert same(loaded["x"], x) and loaded["x"].device.type == "neuron"
    assert loaded["v"].untyped_storage().data_ptr() == loaded["x"].untyped_storage().data_ptr()
    path = tmp_path / "zip.pt"
    torch.save({"x": x}, path)
    loaded = torch.load(path, mmap=True, map_location="neuron")
    assert same(loaded["x"], x) and loaded["x"].device.type == "neuron"


def test_deepcopy_of_state_dict_is_independent():
    m = nn.Linear(4, 3).to("neuron")
    sd = copy.deepcopy(m.state_dict())
    assert sd["weight"].device.type == "neuron"
    assert same(sd["weight"], m.weight)
    with torch.no_grad():
        m.weight.zero_()
    assert sd["weight"].cpu().ne(0).any()


# --- map_location --------------------------------------------------------------------


@pytest.fixture
def saved() -> tuple[torch.Tensor, bytes]:
    x = torch.randn(3, 5, device="neuron")
    buf = io.BytesIO()
    torch.save({"x": x, "xt": x.t()}, buf)
    return x, buf.getvalue()


def load_bytes(data: bytes, **kwargs):
    return torch.load(io.BytesIO(data), **kwargs)


@pytest.mark.parametrize(
    ("map_location", "expected"),
    [
        ("neuron", "neuron:0"),
        ("cpu", "cpu"),
        (torch.device("cpu"), "cpu"),
        (torch.device("neuron", 0), "neuron:0"),
        ({"neuron:0": "cpu"}, "cpu"),
        (lambda storage, loc: storage, "cpu"),  # the CPU storage torch.load read
        (lambda storage, loc: None, "neuron:0"),  # None: the default restore
    ],
    ids=["str", "cpu", "device-cpu", "device", "dict-cpu", "callable-cpu", "callable-none"],
)
def test_map_location(saved, map_location, expected):
    x, data = saved
    loaded = load_bytes(data, map_location=map_location)
    assert loaded["x"].device == torch.device(expected)
    assert same(loaded["x"], x)
    assert loaded["xt"].untyped_storage().data_ptr() == loaded["x"].untyped_storage().data_ptr()


@pytest.mark.parametrize(
    "map_location",
    [
        "neuron:1",
        torch.device("neuron", 1),
        {"neuron:0": "neuron:1"},
        lambda storage, loc: storage.neuron(1),
    ],
    ids=["str", "device", "dict", "callable"],
)
def test_map_location_to_second_device(saved, two_devices, map_location):
    x, data = saved
    loaded = load_bytes(data, map_location=map_location)
    assert loaded["x"].device == torch.device("neuron", 1)
    assert same(loaded["x"], x)


def test_map_location_neuron_means_current_device(saved, two_devices):
    x, data = saved
    with N.device(1):
        loaded = load_bytes(data, map_location="neuron")
    assert loaded["x"].device == torch.device("neuron", 1)
    assert same(loaded["x"], x)


def test_cpu_checkpoint_to_neuron_and_back(tmp_path):
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    path = tmp_path / "cpu.pt"
    torch.save(m.state_dict(), path)
    on_dev = torch.load(path, map_location="neuron")
    assert all(v.device.type == "neuron" for v in on_dev.values())
    path2 = tmp_path / "neuron.pt"
    torch.save(on_dev, path2)
    back = torch.load(path2, map_location="cpu")
    for k, v in m.state_dict().items():
        assert back[k].device.type == "cpu"
        assert same(back[k], v), k
    x = torch.randn(3, 4)
    m2 = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).to("neuron")
    m2.load_state_dict(on_dev)
    torch.testing.assert_close(m2(x.to("neuron")).cpu(), m(x))


@pytest.mark.parametrize(
    "map_location",
    ["neuron:9", torch.device("neuron", 9), {"neuron:0": "neuron:9"}],
    ids=["str", "device", "dict"],
)
def test_map_location_to_missing_device_is_a_clear_error(saved, map_location):
    _, data = saved
    count = N.device_count()
    with pytest.raises(
        RuntimeError, match=rf"device 9 but torch.neuron.device_count\(\) is {count}"
    ):
        load_bytes(data, map_location=map_location)
    # Nothing lost: the same bytes still load, and the device still works.
    assert load_bytes(data)["x"].device.type == "neuron"
    assert (torch.ones(2, device="neuron") + 1).cpu().tolist() == [2.0, 2.0]


def test_callable_to_missing_device_is_a_clear_error(saved):
    _, data = saved
    with pytest.raises(IndexError, match="neuron:9"):
        load_bytes(data, map_location=lambda s, loc: s.neuron(9))


def test_unknown_location_string_is_an_error(saved):
    _, data = saved
    with pytest.raises(RuntimeError, match="tagged with neuronx"):
        load_bytes(data, map_location="neuronx")


def test_checkpoint_of_missing_device_in_other_process(tmp_path, run_py, check, two_devices):
    path = tmp_path / "dev1.pt"
    x = torch.arange(6.0, device="neuron:1")
    torch.save(x, path)
    out = check(
        run_py(
            f"""
            import torch
            try:
                torch.load({str(path)!r})
            except RuntimeError as e:
                print("ERR", e)
            y = torch.load({str(path)!r}, map_location={{"neuron:1": "neuron:0"}})
            print("OK", y.device, y.cpu().tolist())
            """,
            env={"NEURON_RT_VISIBLE_CORES": "0"},
        )
    )
    msg = "Attempting to deserialize object on NEURON device 1 but torch.neuron.device_count() is 1"
    assert f"ERR {msg}" in out
    assert "OK neuron:0 [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]" in out


def test_fresh_process_loads_without_touching_the_device_first(tmp_path, run_py, check):
    path = tmp_path / "fresh.pt"
    x = torch.randn(4, device="neuron")
    torch.save({"x": x}, path)
    out = check(
        run_py(
            f"""
            import torch
            assert not torch.neuron.is_initialized()
            d = torch.load({str(path)!r})
            print(d["x"].device, d["x"].cpu().tolist())
            """
        )
    )
    assert out.split()[0] == "neuron:0"
    assert out.strip().endswith(str(x.cpu().tolist()))


# --- weights_only (the default) ------------------------------------------------------------


def test_weights_only_loads_module_optimizer_and_rng_state():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 6), nn.LayerNorm(6), nn.Linear(6, 1)).to("neuron")
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    for _ in range(2):
        m(torch.randn(4, 6, device="neuron")).square().mean().backward()
        opt.step()
        opt.zero_grad()
    ckpt = {
        "model": m.state_dict(),
        "optim": opt.state_dict(),
        "cpu_rng": torch.get_rng_state(),
        "neuron_rng": N.get_rng_state_all(),
        "device": torch.device("neuron", 0),
        "step": 2,
    }
    loaded = roundtrip(ckpt, weights_only=True)
    for k, v in m.state_dict().items():
        assert loaded["model"][k].device.type == "neuron" and same(loaded["model"][k], v)
    state = loaded["optim"]["state"]
    for i, s in opt.state_dict()["state"].items():
        assert state[i]["exp_avg"].device.type == "neuron"
        assert same(state[i]["exp_avg"], s["exp_avg"])
        assert same(state[i]["exp_avg_sq"], s["exp_avg_sq"])
        assert same(state[i]["step"], s["step"])
    assert loaded["optim"]["param_groups"] == opt.state_dict()["param_groups"]
    assert all(same(a, b) for a, b in zip(loaded["neuron_rng"], N.get_rng_state_all(), strict=True))
    assert loaded["device"] == torch.device("neuron", 0)


def test_weights_only_rejects_arbitrary_objects():
    # The safety check still applies to checkpoints with neuron tensors.
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        roundtrip({"x": torch.ones(2, device="neuron"), "f": copy.deepcopy}, weights_only=True)


# --- storages ------------------------------------------------------------------------------


def test_untyped_storage_neuron_and_is_neuron():
    cpu = torch.arange(8, dtype=torch.int32)
    s = cpu.untyped_storage().neuron()
    assert s.is_neuron and s.device == torch.device("neuron", 0)
    assert not cpu.untyped_storage().is_neuron
    assert s.nbytes() == cpu.untyped_storage().nbytes()
    assert s.neuron() is s  # already there: no copy
    back = torch.empty(0, dtype=torch.int32).set_(s.cpu())
    assert torch.equal(back, cpu)
    t = torch.tensor([], dtype=torch.int32, device="neuron").set_(s)
    assert t.cpu().tolist() == list(range(8))


# torch.load returns a saved UntypedStorage as a TypedStorage (on every device) and
# warns that TypedStorage is deprecated.
@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_storage_to_second_device_and_roundtrip(two_devices):
    s = torch.arange(4.0).untyped_storage().neuron(1)
    assert s.device == torch.device("neuron", 1)
    loaded = roundtrip(s)
    assert loaded.device == torch.device("neuron", 1)
    assert loaded.cpu().tolist() == s.cpu().tolist()


# --- resume ----------------------------------------------------------------------------


class Net(nn.Module):
    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.fc1(x))))


def make_run(dropout: float):
    torch.manual_seed(0)
    model = Net(dropout).to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return model, opt


def batch(step: int):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(8, 16, generator=g)
    y = torch.randint(0, 4, (8,), generator=g)
    return x.to("neuron"), y.to("neuron")


def train(model, opt, steps) -> list[torch.Tensor]:
    losses = []
    for step in steps:
        x, y = batch(step)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return [loss.cpu() for loss in losses]


def checkpoint(model, opt) -> bytes:
    buf = io.BytesIO()
    torch.save(
        {
            "model": model.state_dict(),
            "optim": opt.state_dict(),
            "cpu_rng": torch.get_rng_state(),
            "neuron_rng": N.get_rng_state_all(),
        },
        buf,
    )
    return buf.getvalue()


def resume(data: bytes, dropout: float):
    ckpt = torch.load(io.BytesIO(data))  # weights_only, the default
    torch.manual_seed(12345)  # a fresh process' state is different: must be restored
    model, opt = make_run(dropout)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optim"])
    torch.set_rng_state(ckpt["cpu_rng"])
    N.set_rng_state_all(ckpt["neuron_rng"])
    return model, opt


@pytest.mark.parametrize("dropout", [0.0, 0.3], ids=["no-dropout", "dropout"])
def test_resume_from_checkpoint_is_bit_identical(dropout):
    model, opt = make_run(dropout)
    train(model, opt, range(0, 4))
    data = checkpoint(model, opt)
    straight = train(model, opt, range(4, 10))

    model2, opt2 = resume(data, dropout)
    resumed = train(model2, opt2, range(4, 10))
    assert all(same(a, b) for a, b in zip(straight, resumed, strict=True)), (straight, resumed)
    for (k, a), b in zip(model.state_dict().items(), model2.state_dict().values(), strict=True):
        assert same(a, b), k
    if dropout:
        # The RNG matters: without restoring it the losses differ.
        model3, opt3 = resume(data, dropout)
        torch.manual_seed(777)
        other = train(model3, opt3, range(4, 10))
        assert not all(same(a, b) for a, b in zip(straight, other, strict=True))


def test_gpt_resume_check_example(run_py_many, check):
    # The example resumes in a fresh interpreter, with dropout on.
    script = str(Path(__file__).resolve().parents[1] / "examples" / "gpt" / "resume_check.py")
    args = ["--steps=3", "--more=3", "--n-layer=1", "--n-head=2", "--d-model=32"]
    args += ["--seq-len=16", "--batch=2", "--dropout=0.2"]
    (result,) = run_py_many([(script, None, args)])
    out = check(result)
    assert "bit-identical: True" in out
    assert len([line for line in out.splitlines() if line.strip()[:1].isdigit()]) == 3
