"""Quantized tensors are refused at the call on neuron, never returned as garbage.

TorchNeuron lists quantized tensors (per-channel quantization among them) as
unsupported. Every way of making a quantized tensor on neuron raises
NotImplementedError at the op, naming the op and the neuron device and saying to
quantize on the CPU; nothing is queued that could fail later, so the next
unrelated op and synchronisation succeed. (They used to return a plain tensor of
dtype quint8 whose copy failed asynchronously: the error surfaced at the next,
unrelated sync.) Fake quantization returns float tensors and keeps working.
"""

import warnings

import pytest
import torch

DEV = "neuron"

# torch warns that its quantized dtypes are deprecated, on the CPU as here.
pytestmark = pytest.mark.filterwarnings("ignore:.*quantized tensor creation.*:UserWarning")


def _x():
    return torch.arange(16, dtype=torch.float32, device=DEV).reshape(4, 4) / 8


def _scales():
    return torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64, device=DEV)


def _zero_points():
    return torch.zeros(4, dtype=torch.long, device=DEV)


def _cpu_quantized():
    return torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.quint8)


# (op the message names, call)
CREATORS = {
    "quantize_per_tensor": (
        "aten::quantize_per_tensor",
        lambda: torch.quantize_per_tensor(_x(), 0.1, 0, torch.quint8),
    ),
    "quantize_per_tensor-tensor-params": (
        "aten::quantize_per_tensor",
        lambda: torch.quantize_per_tensor(
            _x(), torch.tensor(0.1, device=DEV), torch.tensor(0, device=DEV), torch.qint8
        ),
    ),
    "quantize_per_tensor-list": (
        "aten::quantize_per_tensor",
        lambda: torch.quantize_per_tensor(
            [_x(), _x()],
            torch.tensor([0.1, 0.2], device=DEV),
            torch.tensor([0, 1], device=DEV),
            torch.quint8,
        ),
    ),
    "quantize_per_tensor_dynamic": (
        "aten::quantize_per_tensor_dynamic",
        lambda: torch.quantize_per_tensor_dynamic(_x(), torch.quint8, False),
    ),
    "quantize_per_channel": (
        "aten::quantize_per_channel",
        lambda: torch.quantize_per_channel(_x(), _scales(), _zero_points(), 0, torch.quint8),
    ),
    "_make_per_tensor_quantized_tensor": (
        "aten::_make_per_tensor_quantized_tensor",
        lambda: torch._make_per_tensor_quantized_tensor(
            torch.zeros(4, dtype=torch.uint8, device=DEV), 0.1, 0
        ),
    ),
    "_make_per_channel_quantized_tensor": (
        "aten::_make_per_channel_quantized_tensor",
        lambda: torch._make_per_channel_quantized_tensor(
            torch.zeros(4, 4, dtype=torch.uint8, device=DEV), _scales(), _zero_points(), 0
        ),
    ),
    "cpu-quantized-to-neuron": ("aten::empty_quantized", lambda: _cpu_quantized().to(DEV)),
    "cpu-quantized-neuron()": ("aten::empty_quantized", lambda: _cpu_quantized().neuron()),
    "_empty_affine_quantized": (
        "aten::_empty_affine_quantized",
        lambda: torch._empty_affine_quantized(
            [4], scale=0.1, zero_point=0, dtype=torch.quint8, device=DEV
        ),
    ),
    "_empty_per_channel_affine_quantized": (
        "aten::_empty_per_channel_affine_quantized",
        lambda: torch._empty_per_channel_affine_quantized(
            [4, 4],
            scales=_scales(),
            zero_points=_zero_points(),
            axis=0,
            dtype=torch.quint8,
            device=DEV,
        ),
    ),
    "empty-quantized-dtype": (
        "aten::empty.memory_format",
        lambda: torch.empty(4, dtype=torch.quint8, device=DEV),
    ),
    "zeros-quantized-dtype": (
        "aten::empty.memory_format",
        lambda: torch.zeros(4, dtype=torch.qint32, device=DEV),
    ),
    "copy-from-cpu-quantized": (
        "aten::_copy_from",
        lambda: torch.empty(4, device=DEV).copy_(_cpu_quantized()),
    ),
}


@pytest.mark.parametrize("name", list(CREATORS))
def test_creating_a_quantized_tensor_on_neuron_raises_at_the_call(name):
    op, create = CREATORS[name]
    x = torch.randn(8, device=DEV)
    before = x.cpu()
    # Twice: the first call of an argument signature waits for the device, later
    # ones are only queued, and neither may leave an error for a later sync.
    for _ in range(2):
        with pytest.raises(NotImplementedError) as info:
            create()
        msg = str(info.value)
        assert op in msg, msg
        assert "quantized" in msg and "neuron" in msg, msg
        assert "on the CPU" in msg, msg
    # Nothing pending: an unrelated op and a synchronisation succeed.
    y = x * 2
    torch.neuron.synchronize()
    assert torch.equal(y.cpu(), before * 2)
    assert torch.equal(x.cpu(), before)


def test_no_error_waits_for_a_later_synchronisation():
    # The reported sequence: per-channel quantization, then unrelated work.
    x = _x()
    for _ in range(3):
        with pytest.raises(NotImplementedError, match="aten::quantize_per_channel"):
            torch.quantize_per_channel(x, _scales(), _zero_points(), 0, torch.quint8)
    z = torch.ones(3, device=DEV).sum()
    torch.neuron.synchronize()
    assert z.item() == 3.0


def test_quantizing_on_the_cpu_still_works_for_neuron_data():
    # What the message suggests: quantize the CPU copy, dequantize, move back.
    x = _x()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        q = torch.quantize_per_channel(
            x.cpu(), _scales().cpu(), _zero_points().cpu(), 0, torch.quint8
        )
    back = q.dequantize().to(DEV)
    assert back.device.type == DEV
    torch.testing.assert_close(back.cpu(), q.dequantize())


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_fake_quantization_returns_float_and_matches_the_cpu(per_channel):
    x = torch.randn(4, 6) * 3
    if per_channel:
        scale = torch.tensor([0.1, 0.2, 0.05, 0.3])
        zp = torch.tensor([0, 3, -2, 1], dtype=torch.int32)

        def fq(t):
            return torch.fake_quantize_per_channel_affine(
                t, scale.to(t.device), zp.to(t.device), 0, -128, 127
            )
    else:

        def fq(t):
            return torch.fake_quantize_per_tensor_affine(t, 0.1, 3, 0, 255)

    expected = fq(x)
    for _ in range(2):
        got = fq(x.to(DEV))
        assert got.dtype == torch.float32 and got.device.type == DEV
        torch.testing.assert_close(got.cpu(), expected)
    torch.neuron.synchronize()
