"""float8 under ``torch.compile(backend="neuron")``: every float8 op that works on
neuron tensors eagerly compiles (fullgraph) and gives eager's result bit for bit,
for float8_e5m2 and float8_e4m3fn, on inputs holding all 256 bit patterns (zeros
of both signs, subnormals, the largest values, infinities and NaNs)."""

import pytest
import torch

FLOAT8 = [torch.float8_e5m2, torch.float8_e4m3fn]


@pytest.fixture(autouse=True)
def _compiled_graphs_must_compile(monkeypatch):
    # A graph the backend cannot compile must fail the test, not run eagerly.
    monkeypatch.delenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", raising=False)


def every_pattern(dtype, seed=0, device="neuron"):
    """[8, 32]: the 256 float8 bit patterns, in a shuffled order."""
    g = torch.Generator().manual_seed(seed)
    bits = torch.randperm(256, generator=g).to(torch.uint8)
    return bits.view(dtype).reshape(8, 32).to(device)


def idx(*values):
    return torch.tensor(values, device="neuron")


# name -> f(a, b, c): a and b float8 [8, 32], c float32 [8, 32].
OPS = {
    "cat": lambda a, b, c: torch.cat([a, b]),
    "cat_dim1_three": lambda a, b, c: torch.cat([a, b, a], 1),
    "cat_many": lambda a, b, c: torch.cat([a] * 9 + [b]),
    "cat_of_views": lambda a, b, c: torch.cat(a.chunk(2, 1)[::-1], 1),
    "cat_of_converted": lambda a, b, c: torch.cat([c.to(a.dtype), (c * 8).to(a.dtype)]),
    "cat_then_float": lambda a, b, c: torch.cat([a, b]).float() * 2,
    "stack": lambda a, b, c: torch.stack([a, b]),
    "stack_dim1": lambda a, b, c: torch.stack([a, b, a], 1),
    "to_float32": lambda a, b, c: a.to(torch.float32),
    "to_float64": lambda a, b, c: a.double(),
    "to_bfloat16": lambda a, b, c: a.to(torch.bfloat16),
    "to_float16": lambda a, b, c: a.to(torch.float16),
    "to_int32": lambda a, b, c: (c * 40).to(a.dtype).to(torch.int32),
    "to_bool": lambda a, b, c: a.to(torch.bool),
    "from_float32": lambda a, b, c: (c * 100).to(a.dtype),
    "from_bfloat16": lambda a, b, c: (c * 100).to(torch.bfloat16).to(a.dtype),
    "from_float64": lambda a, b, c: (c * 100).double().to(a.dtype),
    "from_int32": lambda a, b, c: (c * 40).to(torch.int32).to(a.dtype),
    "from_int64": lambda a, b, c: (c * 40).long().to(a.dtype),
    "from_arange": lambda a, b, c: torch.arange(600, device=a.device).to(a.dtype),
    "from_bool": lambda a, b, c: (c > 0).to(a.dtype),
    "to_other_float8": lambda a, b, c: a.to(
        torch.float8_e4m3fn if a.dtype == torch.float8_e5m2 else torch.float8_e5m2
    ),
    "copy_from_float32": lambda a, b, c: a.clone().copy_(c * 10),
    "copy_to_float32": lambda a, b, c: c.clone().copy_(a),
    "view_shape": lambda a, b, c: a.view(16, 16),
    "reshape_of_transpose": lambda a, b, c: a.t().reshape(-1),
    "transpose": lambda a, b, c: a.transpose(0, 1).contiguous(),
    "permute": lambda a, b, c: a.reshape(2, 4, 32).permute(2, 0, 1).contiguous(),
    "movedim": lambda a, b, c: a.reshape(2, 4, 32).movedim(2, 0).contiguous(),
    "flatten": lambda a, b, c: a.t().flatten(),
    "slice": lambda a, b, c: a[1:7:2, ::3].contiguous(),
    "narrow_copy": lambda a, b, c: a.narrow_copy(1, 5, 9),
    "index_tensor": lambda a, b, c: a[idx(5, 0, 7, 0)],
    "index_two_dims": lambda a, b, c: a[idx(1, 2), idx(30, 0)],
    "index_select": lambda a, b, c: a.index_select(1, idx(31, 2, 2)),
    "diagonal": lambda a, b, c: a[:, :8].diagonal().contiguous(),
    "unfold": lambda a, b, c: a.unfold(1, 4, 3).contiguous(),
    "as_strided": lambda a, b, c: a.as_strided((5, 5), (32, 1), 3).contiguous(),
    "expand": lambda a, b, c: a[:1].expand(4, 32).contiguous(),
    "repeat": lambda a, b, c: a.repeat(2, 3),
    "repeat_interleave": lambda a, b, c: a.repeat_interleave(2, 0),
    "flip": lambda a, b, c: a.flip(0),
    "roll": lambda a, b, c: a.roll(3, 1),
    "split": lambda a, b, c: [t.contiguous() for t in a.split(5, 1)],
    "tensor_split": lambda a, b, c: [t.contiguous() for t in a.tensor_split(3, 0)],
    "unbind": lambda a, b, c: a.unbind(0),
    "where": lambda a, b, c: torch.where(c > 0, a, b),
    "where_scalar_other": lambda a, b, c: torch.where(c > 0, a, 0.0),
    "where_scalar_self": lambda a, b, c: torch.where(c > 0, 1.5, a),
    "clone": lambda a, b, c: a.clone(),
    "detach_clone": lambda a, b, c: a.detach().clone(),
    "abs": lambda a, b, c: a.abs(),
    "abs_then_float": lambda a, b, c: a.abs().float(),
    "mul": lambda a, b, c: a * b,
    "eq": lambda a, b, c: a == b,
    "ne": lambda a, b, c: a != b,
    "isnan": lambda a, b, c: a.isnan(),
    "view_as_uint8": lambda a, b, c: a.view(torch.uint8),
    "uint8_view_as_float8": lambda a, b, c: a.view(torch.uint8).flip(1).view(a.dtype),
    "zeros_like": lambda a, b, c: torch.zeros_like(a),
    "full": lambda a, b, c: torch.full((3, 5), 1.5, dtype=a.dtype, device=a.device),
    "new_zeros": lambda a, b, c: a.new_zeros(3, 2),
    "new_full": lambda a, b, c: a.new_full((2, 2), -3.0),
    "fill_": lambda a, b, c: a.clone().fill_(3.0),
    "pad": lambda a, b, c: torch.nn.functional.pad(a, (1, 2)),
    "pad_value": lambda a, b, c: torch.nn.functional.pad(a, (2, 1, 1, 0), value=2.0),
    "index_put": lambda a, b, c: a.clone().index_put_((idx(1, 6),), b[:2]),
    "setitem_index": lambda a, b, c: _setitem(a.clone(), idx(0, 2), b[:2]),
    "setitem_slice": lambda a, b, c: _setitem(a.clone(), slice(0, 3), b[5:]),
    "setitem_slice_from_float32": lambda a, b, c: _copy_into_slice(a.clone(), c),
    "select_scatter": lambda a, b, c: torch.select_scatter(a, b[0], 0, 1),
    "slice_scatter": lambda a, b, c: torch.slice_scatter(a, b[:, :4], 1, 8, 12),
    "diagonal_scatter": lambda a, b, c: torch.diagonal_scatter(a[:, :8], b[0, :8]),
}


# Equal values but not equal bits, where eager mode's float8 kernels differ from the
# C++ kernels Inductor generates (on CPU tensors too): a float8_e4m3fn NaN converted
# to float keeps its payload eagerly and becomes the canonical NaN compiled; eager
# abs keeps the sign of -0.0 and of negative NaNs (x < 0 ? -x : x), compiled abs
# clears it. Those ops are compared as values: every non-NaN value exactly, zeros
# of either sign equal, NaN where eager has NaN.
VALUES_ONLY = {"to_float32", "to_float64", "cat_then_float", "copy_to_float32"}
VALUES_ONLY_ALL_FLOAT8 = {"abs", "abs_then_float"}


def _setitem(t, index, value):
    t[index] = value
    return t


def _copy_into_slice(t, c):
    t[:, 2:4].copy_(c[:, :2] * 10)
    return t


def _bits(x):
    """A result as integers of its bits (NaN payloads and -0.0 included)."""
    if isinstance(x, (list, tuple)):
        return [_bits(t) for t in x]
    x = x.cpu()
    if x.is_floating_point():
        return x.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.itemsize])
    return x


def _assert_same_bits(actual, expected):
    if isinstance(expected, list):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            _assert_same_bits(a, e)
        return
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    assert torch.equal(_bits(actual), _bits(expected))


@pytest.mark.parametrize("dtype", FLOAT8, ids=["e5m2", "e4m3fn"])
@pytest.mark.parametrize("name", list(OPS))
def test_a_float8_op_compiles_to_eagers_bits(name, dtype):
    op = OPS[name]
    a, b = every_pattern(dtype), every_pattern(dtype, seed=1)
    c = torch.randn(8, 32, generator=torch.Generator().manual_seed(1)).to("neuron")
    expected = op(a, b, c)  # works eagerly: the premise of the sweep
    expected = list(expected) if isinstance(expected, (list, tuple)) else expected
    torch._dynamo.reset()
    got = torch.compile(op, backend="neuron", fullgraph=True)(a, b, c)
    got = list(got) if isinstance(got, (list, tuple)) else got
    if name in VALUES_ONLY_ALL_FLOAT8 or (name in VALUES_ONLY and dtype == torch.float8_e4m3fn):
        torch.testing.assert_close(
            got.cpu().float(), expected.cpu().float(), rtol=0, atol=0, equal_nan=True
        )
    else:
        _assert_same_bits(got, expected)
    assert torch.equal(_bits(a), _bits(every_pattern(dtype)))  # inputs untouched
