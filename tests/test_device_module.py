"""The `neuron` device, the torch.neuron device module and torch.accelerator on top of it."""

import re

import pytest
import torch
from torch import nn

import torch_neuronx

# Issue point 2: the device-module API, on torch.neuron and as torch_neuronx.<name>.
DEVICE_API = [
    "is_available",
    "device_count",
    "current_device",
    "set_device",
    "device",
    "get_device_name",
    "get_device_properties",
    "synchronize",
    "Stream",
    "Event",
    "stream",
    "current_stream",
    "default_stream",
    "set_stream",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_peak_memory_stats",
    "empty_cache",
    "is_bf16_supported",
]

VISIBLE = re.compile(r"there (is|are) \d+ visible neuron devices?")


@pytest.fixture(autouse=True)
def _restore_current_device():
    prev = torch.neuron.current_device()
    yield
    torch.neuron.set_device(prev)
    torch.neuron.set_stream(torch.neuron.default_stream(prev))


# --- the device and the tensor / module methods ---------------------------------------


def test_torch_device_strings():
    assert torch.device("neuron").type == "neuron"
    assert torch.device("neuron").index is None
    assert torch.device("neuron:1") == torch.device("neuron", 1)
    assert torch.device("neuron:1").index == 1
    assert str(torch.device("neuron", 3)) == "neuron:3"


def test_tensor_methods_and_is_neuron(two_devices):
    c = torch.randn(3, 4)
    n = c.neuron()
    assert n.device == torch.device("neuron:0")
    assert n.is_neuron and not c.is_neuron
    assert torch.equal(n.cpu(), c)
    n1 = c.neuron(1)
    assert n1.device == torch.device("neuron:1")
    assert torch.equal(n1.cpu(), c)
    assert torch.empty(2, device="neuron").is_neuron
    assert c.to("neuron:1").device.index == 1


def test_storage_methods():
    s = torch.arange(4.0).untyped_storage().neuron()
    assert s.is_neuron
    assert s.device.type == "neuron"


def test_module_neuron_and_to(two_devices):
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    x = torch.randn(5, 4)
    expected = ref(x)

    m = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    m.load_state_dict(ref.state_dict())
    assert m.neuron() is m
    assert all(p.is_neuron and p.device.index == 0 for p in m.parameters())
    torch.testing.assert_close(m(x.neuron()).cpu(), expected)

    m.to("neuron:1")
    assert all(p.device == torch.device("neuron:1") for p in m.parameters())
    torch.testing.assert_close(m(x.to("neuron:1")).cpu(), expected)

    m.to("neuron")
    assert all(p.device == torch.device("neuron:0") for p in m.parameters())
    m.cpu()
    assert all(p.device.type == "cpu" for p in m.parameters())


# --- the device module -----------------------------------------------------------------


@pytest.mark.parametrize("name", DEVICE_API)
def test_device_api_on_both_modules(name):
    assert hasattr(torch.neuron, name), f"torch.neuron.{name} is missing"
    assert hasattr(torch_neuronx, name), f"torch_neuronx.{name} is missing"
    assert getattr(torch.neuron, name) is getattr(torch_neuronx, name)
    assert name in torch_neuronx.__all__


def test_availability_and_count():
    assert torch.neuron.is_available() is True
    n = torch.neuron.device_count()
    assert isinstance(n, int) and n >= 1
    assert torch.neuron.is_bf16_supported() is True


def test_current_and_set_device(two_devices):
    torch.neuron.set_device(1)
    assert torch.neuron.current_device() == 1
    assert torch.empty(1, device="neuron").device == torch.device("neuron:1")
    torch.neuron.set_device(torch.device("neuron:0"))
    assert torch.neuron.current_device() == 0
    torch.neuron.set_device("neuron:1")
    assert torch.neuron.current_device() == 1


def test_device_context_manager(two_devices):
    assert torch.neuron.current_device() == 0
    with torch.neuron.device(1):
        assert torch.neuron.current_device() == 1
        assert torch.ones(1, device="neuron").device.index == 1
        with torch.neuron.device("neuron:0"):
            assert torch.neuron.current_device() == 0
        assert torch.neuron.current_device() == 1
    assert torch.neuron.current_device() == 0
    x = torch.ones(1, device="neuron:1")
    with torch.neuron.device_of(x):
        assert torch.neuron.current_device() == 1
    assert torch.neuron.current_device() == 0


def test_get_device_name_and_capability():
    name = torch.neuron.get_device_name()
    assert name == "neuron:0"  # TorchNeuron's name: the device string
    assert torch.neuron.get_device_name(0) == name
    cap = torch.neuron.get_device_capability()
    assert isinstance(cap, tuple) and len(cap) == 2


def test_get_device_properties_fields():
    n = torch.neuron.device_count()
    for i in range(n):
        p = torch.neuron.get_device_properties(i)
        assert p.name == "trn2"  # the platform, as TorchNeuron's
        assert isinstance(p.total_memory, int) and p.total_memory > 0
        assert p.physical_cores_per_logical_core in (1, 2)
        assert p.logical_cores_per_chip >= 1
        assert p.num_chips >= 1
        assert 0 <= p.chip < p.num_chips
        assert 0 <= p.logical_core < p.logical_cores_per_chip * p.num_chips
        assert "total_memory" in repr(p)
    props = [torch.neuron.get_device_properties(i) for i in range(n)]
    assert len({p.logical_core for p in props}) == n  # distinct cores
    # The current device is the default, and devices can be named several ways.
    assert torch.neuron.get_device_properties() == props[0]
    assert torch.neuron.get_device_properties("neuron:0") == props[0]
    assert torch.neuron.get_device_properties(torch.device("neuron", 0)) == props[0]
    # The HBM capacity is the free+total pair's total.
    assert torch.neuron.mem_get_info(0)[1] == props[0].total_memory


def test_synchronize_variants():
    x = torch.randn(64, 64, device="neuron")
    y = x @ x
    torch.neuron.synchronize()
    torch.neuron.synchronize(0)
    torch.neuron.synchronize("neuron:0")
    torch.neuron.synchronize(torch.device("neuron:0"))
    assert torch.neuron.current_stream().query()
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu())


def test_stream_api_types():
    s = torch.neuron.Stream()
    assert isinstance(s, torch.Stream)
    assert s.device == torch.device("neuron:0")
    e = torch.neuron.Event()
    assert isinstance(e, torch.Event)
    assert isinstance(e, torch.neuron.Event)
    assert not isinstance(torch.Event("cpu"), torch.neuron.Event)
    d = torch.neuron.default_stream()
    assert d.stream_id == 0
    assert torch.neuron.current_stream() == d
    with torch.neuron.stream(s):
        assert torch.neuron.current_stream() == s
    assert torch.neuron.current_stream() == d
    torch.neuron.set_stream(s)
    assert torch.neuron.current_stream() == s
    torch.neuron.set_stream(d)
    assert torch.neuron.current_stream() == d


def test_memory_api_returns_numbers():
    x = torch.empty(1024, device="neuron")
    for f in (
        torch.neuron.memory_allocated,
        torch.neuron.max_memory_allocated,
        torch.neuron.memory_reserved,
        torch.neuron.max_memory_reserved,
    ):
        assert isinstance(f(), int) and f() > 0
        assert f(0) == f() == f("neuron:0")
    assert isinstance(torch.neuron.memory_stats(), dict)
    assert "neuron:0" in torch.neuron.memory_summary()
    torch.neuron.reset_peak_memory_stats()
    torch.neuron.empty_cache()
    del x


# --- torch.accelerator ------------------------------------------------------------------


def test_accelerator_current_accelerator_and_count():
    assert torch.accelerator.is_available()
    acc = torch.accelerator.current_accelerator()
    assert acc == torch.device("neuron")
    assert acc.type == "neuron"
    assert torch.accelerator.device_count() == torch.neuron.device_count()


def test_accelerator_device_index(two_devices):
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.set_device_index(1)
    assert torch.accelerator.current_device_index() == 1
    assert torch.neuron.current_device() == 1
    assert torch.empty(1, device="neuron").device.index == 1
    torch.accelerator.set_device_index(0)
    with torch.accelerator.device_index(1):
        assert torch.neuron.current_device() == 1
    assert torch.neuron.current_device() == 0


def test_accelerator_streams():
    s = torch.neuron.Stream()
    assert torch.accelerator.current_stream() == torch.neuron.default_stream()
    torch.accelerator.set_stream(s)
    try:
        assert torch.accelerator.current_stream() == s
        assert torch.neuron.current_stream() == s
    finally:
        torch.accelerator.set_stream(torch.neuron.default_stream())
    assert torch.accelerator.current_stream().stream_id == 0


def test_accelerator_synchronize(busy_fn):
    torch.neuron.synchronize()
    busy_fn(4)
    torch.accelerator.synchronize()
    assert torch.neuron.current_stream().query()
    torch.accelerator.synchronize(0)


def test_accelerator_memory_stats():
    torch.neuron.synchronize()
    x = torch.empty(4096, device="neuron")
    assert torch.accelerator.memory_allocated() == torch.neuron.memory_allocated()
    assert torch.accelerator.memory_reserved() == torch.neuron.memory_reserved()
    assert torch.accelerator.max_memory_allocated() == torch.neuron.max_memory_allocated()
    assert torch.accelerator.max_memory_reserved() == torch.neuron.max_memory_reserved()
    stats = torch.accelerator.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.neuron.memory_allocated()
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == torch.accelerator.memory_allocated()
    free, total = torch.accelerator.get_memory_info()
    assert 0 < free <= total == torch.neuron.get_device_properties(0).total_memory
    del x
    torch.accelerator.empty_cache()


# --- invalid device indices ----------------------------------------------------------


def _too_large() -> int:
    return torch.neuron.device_count() + 3


def _assert_clear(excinfo, index: int) -> None:
    msg = str(excinfo.value)
    assert f"neuron:{index}" in msg, msg
    assert VISIBLE.search(msg), msg
    assert str(torch.neuron.device_count()) in msg, msg


def test_empty_on_too_large_index():
    idx = 7 if torch.neuron.device_count() <= 7 else _too_large()
    with pytest.raises((RuntimeError, IndexError)) as ei:
        torch.empty(1, device=f"neuron:{idx}")
    _assert_clear(ei, idx)


def test_set_device_too_large():
    with pytest.raises((RuntimeError, IndexError)) as ei:
        torch.neuron.set_device(9)
    _assert_clear(ei, 9)
    assert torch.neuron.current_device() == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda i: torch.ones(2).to(f"neuron:{i}"),
        lambda i: torch.tensor([1.0], device=f"neuron:{i}"),
        lambda i: torch.ones(2).neuron(i),
        lambda i: torch.neuron.get_device_properties(i),
        lambda i: torch.neuron.get_device_name(i),
        lambda i: torch.neuron.synchronize(i),
        lambda i: torch.neuron.current_stream(i),
        lambda i: torch.neuron.Stream(i),
        lambda i: torch.neuron.memory_allocated(i),
        lambda i: torch.neuron.memory_stats(i),
        lambda i: torch.neuron.device(i).__enter__(),
        lambda i: torch.accelerator.set_device_index(i),
        lambda i: torch.accelerator.synchronize(i),
    ],
    ids=[
        "to",
        "tensor",
        "tensor.neuron",
        "get_device_properties",
        "get_device_name",
        "synchronize",
        "current_stream",
        "Stream",
        "memory_allocated",
        "memory_stats",
        "device_ctx",
        "accelerator.set_device_index",
        "accelerator.synchronize",
    ],
)
def test_too_large_index_is_a_clear_error(call):
    i = _too_large()
    with pytest.raises((RuntimeError, IndexError)) as ei:
        call(i)
    _assert_clear(ei, i)
    assert torch.neuron.current_device() == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda: torch.neuron.get_device_properties(-1),
        lambda: torch.neuron.synchronize(-1),
        lambda: torch.neuron.current_stream(-1),
        lambda: torch.neuron.memory_allocated(-1),
        lambda: torch.neuron.get_device_name(-2),
    ],
    ids=["get_device_properties", "synchronize", "current_stream", "memory_allocated", "name"],
)
def test_negative_index_is_a_clear_error(call):
    with pytest.raises((RuntimeError, IndexError)) as ei:
        call()
    msg = str(ei.value)
    assert "neuron:-" in msg and VISIBLE.search(msg), msg


def test_negative_index_in_device_string():
    # torch itself rejects negative indices in device strings and torch.device.
    with pytest.raises(RuntimeError, match="negative|Invalid device"):
        torch.device("neuron", -2)
    with pytest.raises(RuntimeError, match="Invalid device"):
        torch.empty(1, device="neuron:-1")


def test_device_usable_after_index_errors():
    with pytest.raises((RuntimeError, IndexError)):
        torch.empty(1, device=f"neuron:{_too_large()}")
    x = torch.arange(6.0, device="neuron").reshape(2, 3)
    assert (x * x).sum().item() == 55.0


def test_accelerator_device_capability_lists_dense_dtypes():
    cap = torch.accelerator.get_device_capability()
    dtypes = cap["supported_dtypes"]
    for dt in (
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.uint8,
        torch.bool,
        torch.complex64,
    ):
        assert dt in dtypes
        assert torch.zeros(2, dtype=dt, device="neuron").dtype == dt
    assert torch.qint8 not in dtypes
    with pytest.raises(IndexError, match="visible neuron device"):
        torch.accelerator.get_device_capability("neuron:99")
