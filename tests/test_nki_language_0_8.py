"""The NKI 0.7/0.8 names that NKI-lib's kernels import and use: ``nl.NKIObject``,
``nki.isa.constants``, ``nki.dtype`` and dtypes that are NumPy types by name
(``nl.bool`` too), ``nki.simulate``, HBM tensors in ``if``, and a reshape of a
result as the kernel's return value. Each kernel is small, written here in the
style of NKI's documentation, and checked against NumPy on NumPy arrays, CPU
tensors and neuron tensors."""

import dataclasses
import sys
from dataclasses import dataclass, field

import neuronxcc.nki.isa as legacy_isa
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch

import torch_neuronx.nki as tnki
from torch_neuronx.nki import NKIError

RNG = np.random.default_rng(41)
DEVICES = ["cpu", "neuron"]


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def on(device, *arrays):
    return [torch.from_numpy(a).to(device) for a in arrays]


# nl.NKIObject ---------------------------------------------------------------------
@dataclass
class ScaleConfig(nl.NKIObject):
    """A kernel configuration as NKI-lib writes them: a dataclass with defaults."""

    scale: float = 1.0
    cols: int = 0
    dtype: nki.dtype = nl.float32


@nki.jit
def scaled_columns(a, cfg: ScaleConfig):
    out = nl.ndarray((a.shape[0], cfg.cols), dtype=cfg.dtype, buffer=nl.shared_hbm)
    tile = nl.load(a[:, 0 : cfg.cols])
    nl.store(out, value=nl.multiply(tile, cfg.scale, dtype=cfg.dtype))
    return out


class Tiling(nl.NKIObject):
    """A plain subclass: fields declared by annotation, some left unset at
    construction and derived by a method."""

    rows: int
    cols: int
    tile_cols: int = 32
    num_tiles: int

    def derive(self):
        self.num_tiles = self.cols // self.tile_cols
        return self


@nki.jit
def tiled_double(a):
    tiling = Tiling(rows=a.shape[0], cols=a.shape[1]).derive()
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(tiling.num_tiles):
        cols = nl.ds(t * tiling.tile_cols, tiling.tile_cols)
        nl.store(out[:, cols], value=nl.add(nl.load(a[:, cols]), nl.load(a[:, cols])))
    return out


def test_a_dataclass_config_drives_a_kernel_numpy():
    x = rand(128, 64)
    got = nki.simulate(scaled_columns)(x, ScaleConfig(scale=3.0, cols=32))
    np.testing.assert_allclose(got, 3.0 * x[:, :32], rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_a_dataclass_config_drives_a_kernel_on_tensors(device):
    x = rand(128, 64)
    (t,) = on(device, x)
    got = scaled_columns(t, ScaleConfig(scale=-0.5, cols=48))
    assert got.device.type == device
    np.testing.assert_allclose(got.cpu().numpy(), -0.5 * x[:, :48], rtol=1e-6)


def test_equal_configs_share_a_trace_and_a_changed_one_retraces():
    # Dataclasses are unhashable: the trace cache keys them by their fields.
    x = rand(128, 64)
    first = tnki.compiled_for(scaled_columns, (), (x, ScaleConfig(scale=2.0, cols=16)), {})
    again = tnki.compiled_for(scaled_columns, (), (x, ScaleConfig(scale=2.0, cols=16)), {})
    other = tnki.compiled_for(scaled_columns, (), (x, ScaleConfig(scale=2.0, cols=32)), {})
    assert first is again
    assert other is not first
    np.testing.assert_allclose(
        nki.simulate(scaled_columns)(x, ScaleConfig(scale=2.0, cols=32)), 2.0 * x[:, :32]
    )


@pytest.mark.parametrize("device", DEVICES)
def test_a_plain_nki_object_with_fields_set_later(device):
    x = rand(128, 96)
    (t,) = on(device, x)
    np.testing.assert_allclose(tiled_double(t).cpu().numpy(), 2 * x, rtol=1e-6)
    np.testing.assert_allclose(nki.simulate(tiled_double)(x), 2 * x, rtol=1e-6)


def test_nki_object_construction_like_a_dataclass_base():
    t = Tiling(rows=128, cols=64)
    assert (t.rows, t.cols, t.tile_cols) == (128, 64, 32)  # a default is read through
    assert t.derive().num_tiles == 2
    assert repr(t) == "Tiling(rows=128, cols=64, tile_cols=32, num_tiles=2)"
    # Any keyword becomes an attribute, declared or not (NKI's **kwargs).
    extra = Tiling(rows=1, cols=2, label="x")
    assert extra.label == "x"
    assert isinstance(ScaleConfig(), nl.NKIObject)
    assert ScaleConfig(cols=4) == ScaleConfig(cols=4)  # the dataclass's own equality
    assert nl.NKIObject is nki.language.NKIObject


@dataclass
class Buffers(nl.NKIObject):
    """NKI-lib's container style: a @dataclass whose members are plain class
    attributes (no annotations), filled by keyword."""

    src = None
    dst = None


@dataclass(frozen=True)
class Limits(nl.NKIObject):
    low: float
    high: float = 1.0
    history: list = field(default_factory=list)

    def __post_init__(self):
        self.history.append("checked")


@nki.jit
def clamp_with_objects(a):
    limits = Limits(low=-0.5)
    bufs = Buffers(src=nl.load(a))
    bufs.dst = nl.minimum(nl.maximum(bufs.src, limits.low), limits.high)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=bufs.dst)
    return out


def test_a_dataclass_nki_object_takes_nki_keywords_and_keeps_dataclass_rules():
    b = Buffers(src=1, dst=2)  # keywords its dataclass __init__ would refuse
    assert (b.src, b.dst) == (1, 2)
    assert Buffers() == Buffers()
    lim = Limits(-1.0)  # positional, in field order; defaults; default_factory
    assert (lim.low, lim.high, lim.history) == (-1.0, 1.0, ["checked"])
    assert Limits(-1.0).history is not lim.history
    assert Limits(low=0.0, high=2.0) == Limits(0.0, 2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        lim.low = 3.0
    with pytest.raises(TypeError, match="multiple values for argument 'low'"):
        Limits(1.0, low=2.0)
    with pytest.raises(TypeError, match="takes 3 positional arguments"):
        Limits(1.0, 2.0, [], 4)
    # A field with no default stays unset until assigned (NKI), and says so.
    with pytest.raises(AttributeError, match=r"Limits\.low is declared but was never set"):
        Limits().low  # noqa: B018


@pytest.mark.parametrize("device", DEVICES)
def test_dataclass_nki_objects_inside_a_kernel(device):
    x = rand(128, 32) * 4
    (t,) = on(device, x)
    np.testing.assert_allclose(clamp_with_objects(t).cpu().numpy(), np.clip(x, -0.5, 1.0))


def test_nki_object_errors_name_the_field():
    with pytest.raises(AttributeError, match=r"Tiling\.num_tiles is declared but was never set"):
        Tiling(rows=1, cols=2).num_tiles  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        Tiling(rows=1, cols=2).nope  # noqa: B018
    with pytest.raises(TypeError, match=r"keyword arguments \(rows, cols, tile_cols, num_tiles\)"):
        Tiling(128, 64)


def test_an_unset_field_read_in_a_kernel_is_an_error_at_the_call():
    @nki.jit
    def reads_unset(a):
        tiling = Tiling(rows=a.shape[0], cols=a.shape[1])  # never derived
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for _ in nl.affine_range(tiling.num_tiles):
            nl.store(out, value=nl.load(a))
        return out

    with pytest.raises(AttributeError, match="num_tiles"):
        nki.simulate(reads_unset)(rand(128, 64))


# nki.isa.constants --------------------------------------------------------------
def test_isa_constants_import_forms_give_one_set_of_enums():
    import neuronxcc.nki.isa.constants as legacy_constants
    from nki.isa import constants as nisa_constants
    from nki.isa.constants import dge_mode, matmul_perf_mode, oob_mode

    assert oob_mode is nisa.oob_mode is nisa_constants.oob_mode is legacy_constants.oob_mode
    assert dge_mode is nisa.dge_mode is legacy_isa.dge_mode
    assert matmul_perf_mode is nisa.matmul_perf_mode
    assert nisa.constants.engine is nisa.engine
    assert {m.name for m in dge_mode} == {"unknown", "swdge", "hwdge", "none"}
    assert {m.name for m in oob_mode} == {"error", "skip"}
    assert {m.name for m in matmul_perf_mode} == {"none", "double_row"}


def shifted_rows_kernel(mode):
    """Rows 64.. of ``a`` moved to the top; with ``oob_mode.skip`` the rows
    past the end are skipped (left zero)."""
    from nki.isa.constants import dge_mode, oob_mode

    @nki.jit
    def shifted_rows(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        tile = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.memset(tile, value=0.0)
        i_p = nl.arange(a.shape[0])[:, None]
        i_f = nl.arange(a.shape[1])[None, :]
        nisa.dma_copy(
            dst=tile,
            src=a[i_p + 64, i_f],
            oob_mode=getattr(oob_mode, mode),
            dge_mode=dge_mode.hwdge,
        )
        nisa.dma_copy(dst=out, src=tile)
        return out

    return shifted_rows


@pytest.mark.parametrize("device", DEVICES)
def test_dma_with_constants_oob_mode_skip(device):
    x = rand(128, 8)
    want = np.zeros_like(x)
    want[:64] = x[64:]
    kernel = shifted_rows_kernel("skip")
    (t,) = on(device, x)
    np.testing.assert_array_equal(kernel(t).cpu().numpy(), want)
    np.testing.assert_array_equal(nki.simulate(kernel)(x), want)


def test_dma_with_constants_oob_mode_error_raises():
    with pytest.raises(NKIError, match="out of bounds"):
        nki.simulate(shifted_rows_kernel("error"))(rand(128, 8))


# Data types ---------------------------------------------------------------------
ALL_TYPES = [
    "float32",
    "bfloat16",
    "float16",
    "float8_e4m3",
    "float8_e4m3fn",
    "float8_e5m2",
    "int32",
    "uint32",
    "int16",
    "uint16",
    "int8",
    "uint8",
    "bool",
]


@pytest.mark.parametrize("name", ALL_TYPES)
def test_a_dtype_is_its_numpy_name(name):
    d = getattr(nl, name)
    assert str(d) == name
    assert f"{d}" == name
    assert d == name and name == d
    assert isinstance(d, nki.dtype)


NUMPY_NATIVE_TYPES = [
    n for n in ALL_TYPES if n not in ("bfloat16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2")
]


@pytest.mark.parametrize("name", NUMPY_NATIVE_TYPES)
def test_np_dtype_of_a_numpy_native_type(name):
    d = getattr(nl, name)
    assert np.dtype(d) == np.dtype(name)
    assert np.zeros(3, d).dtype == np.dtype(name)
    assert np.dtype(name) == d  # both ways round


def test_np_dtype_of_bfloat16_and_fp8_is_the_simulator_array_type():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert np.dtype(nl.bfloat16) == np.dtype(ml_dtypes.bfloat16)
    assert np.dtype(nl.float8_e5m2) == np.dtype(ml_dtypes.float8_e5m2)
    # NKI's two E4M3 types (tests/test_nki_fp8_types.py): float8_e4m3 is
    # IEEE-style (max 240), float8_e4m3fn has no inf (max 448).
    assert np.dtype(nl.float8_e4m3) == np.dtype(ml_dtypes.float8_e4m3)
    assert np.dtype(nl.float8_e4m3fn) == np.dtype(ml_dtypes.float8_e4m3fn)
    assert nl.float8_e4m3 != nl.float8_e4m3fn
    x = np.arange(4, dtype=np.float32).astype(nl.bfloat16)
    assert x.dtype == nl.bfloat16


def test_np_dtype_of_bfloat16_without_ml_dtypes_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # `import ml_dtypes` fails
    with pytest.raises(TypeError, match="install ml_dtypes"):
        nl.bfloat16.dtype  # noqa: B018
    with pytest.raises(TypeError):
        np.dtype(nl.bfloat16)


def test_nki_dtype_is_a_module_of_types_and_still_the_type():
    # NKI-lib's tests: `import nki.dtype as nt; nt.float8_e4m3`; its kernels:
    # `dtype: nki.dtype = nl.bfloat16` and isinstance checks.
    import nki.dtype as nt

    assert nt.float8_e4m3 == nl.float8_e4m3 and nt.float8_e4m3fn is nl.float8_e4m3fn
    assert nt.bfloat16 is nl.bfloat16 and nt.float32 is nl.float32
    assert nt.float8_e4m3fn_x4 is nl.float8_e4m3fn_x4
    assert isinstance(nl.int8, nki.dtype) and isinstance(nl.int8, nt)
    assert not isinstance("float32", nt) and not isinstance(np.float32, nt)
    assert nt("bfloat16") is nl.bfloat16 and nt(np.float16) == nl.float16
    with pytest.raises((TypeError, ValueError)):
        nt("not_a_type")


def test_dtype_names_and_equalities_that_kernels_rely_on():
    assert nl.bool is nl.bool_
    assert nl.float32 == np.float32 and nl.float32 == torch.float32
    assert nl.bfloat16 == torch.bfloat16 and nl.bfloat16 != nl.float16
    assert str(nl.float32) in ["float32", "bfloat16"]
    assert {"float32": 4}[nl.float32] == 4  # hashes as its name
    assert repr(nl.float32) == "nl.float32"


MX_PACKED_TYPES = ["float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4"]


def test_mx_packed_types_are_names_a_kernel_can_compare():
    # NKI-lib lists them among supported types at import time.
    supported = [nl.bfloat16, nl.float8_e4m3fn_x4, nl.float4_e2m1fn_x4]
    assert str(nl.float32) not in supported
    assert "float8_e4m3fn_x4" in supported and str(nl.float8_e5m2_x4) not in supported
    assert [str(getattr(nl, n)) for n in MX_PACKED_TYPES] == MX_PACKED_TYPES
    assert nl.float8_e4m3fn_x4 != nl.float8_e5m2_x4 != nl.float4_e2m1fn_x4
    assert nl.float8_e4m3fn_x4 != nl.float8_e4m3


@pytest.mark.parametrize("name", MX_PACKED_TYPES)
def test_a_tensor_of_an_mx_packed_type(name):
    # MX numbers (test_nki_mx.py): tensors of them exist, NumPy names them.
    @nki.jit
    def allocates(a):
        t = nl.ndarray(a.shape, dtype=getattr(nl, name), buffer=nl.sbuf)
        nki.isa.memset(dst=t, value=0.0)
        out = nl.ndarray(a.shape, dtype=getattr(nl, name), buffer=nl.shared_hbm)
        nki.isa.dma_copy(dst=out, src=t)
        return out

    out = nki.simulate(allocates)(rand(128, 4))
    assert str(out.dtype) == name and not out.view(np.uint8).any()
    assert str(np.dtype(getattr(nl, name))) == name


@nki.jit
def by_dtype_name(a):
    """Chooses by ``str(dtype)`` as NKI-lib's kernels do."""
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    tile = nl.load(a)
    if str(a.dtype) == str(nl.bfloat16):
        tile = nl.multiply(tile, 2.0, dtype=nl.float32)
    else:
        tile = nl.multiply(tile, 3.0, dtype=nl.float32)
    nl.store(out, value=tile)
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_kernels_branch_on_str_of_a_dtype(device):
    x = rand(128, 16)
    (t,) = on(device, x)
    np.testing.assert_allclose(by_dtype_name(t).cpu().numpy(), 3 * x, rtol=1e-6)
    tb = t.to(torch.bfloat16)
    want = 2 * tb.float().cpu().numpy()
    np.testing.assert_allclose(by_dtype_name(tb).cpu().numpy(), want, rtol=1e-6)


@nki.jit
def greater_mask(a, b):
    out = nl.ndarray(a.shape, dtype=nl.bool, buffer=nl.shared_hbm)
    nl.store(out, value=nl.greater(nl.load(a), nl.load(b), dtype=nl.bool))
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_nl_bool_results(device):
    x, y = rand(128, 32), rand(128, 32)
    tx, ty = on(device, x, y)
    got = greater_mask(tx, ty)
    assert got.dtype == torch.bool
    np.testing.assert_array_equal(got.cpu().numpy(), x > y)
    got_np = nki.simulate(greater_mask)(x, y)
    assert got_np.dtype == np.dtype(nl.bool)
    np.testing.assert_array_equal(got_np, x > y)


# nki.simulate ------------------------------------------------------------------
@nki.jit
def row_block_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    rows = nl.ds(nl.program_id(0) * 128, 128)
    nl.store(out[rows, :], value=nl.add(nl.load(a[rows, :]), nl.load(b[rows, :])))
    return out


def test_nki_simulate_is_the_documented_callable():
    assert callable(nki.simulate) and callable(nki.profile)
    x, y = rand(128, 64), rand(128, 64)
    got = nki.simulate(row_block_add)(x, y)
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, x + y, rtol=1e-6)


def test_nki_simulate_with_a_grid_and_torch_tensors():
    x, y = rand(256, 32), rand(256, 32)
    got = nki.simulate(row_block_add[2])(*on("cpu", x, y))
    assert isinstance(got, torch.Tensor) and got.device.type == "cpu"  # the same format out
    np.testing.assert_allclose(got.numpy(), x + y, rtol=1e-6)
    got = nki.simulate(row_block_add)[2](*on("neuron", x, y))
    assert got.device.type == "neuron"
    np.testing.assert_allclose(got.cpu().numpy(), x + y, rtol=1e-6)


def test_nki_simulate_wraps_a_plain_function():
    def plain_copy(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        return out

    x = rand(128, 8)
    np.testing.assert_array_equal(nki.simulate(plain_copy)(x), x)


def test_nki_simulate_of_a_non_kernel_is_an_error():
    with pytest.raises(TypeError, match="expected an NKI kernel"):
        nki.simulate(42)


# HBM tensors in `if`, and a reshaped result -------------------------------------
@nki.jit
def add_optional_bias(a, bias=None):
    """``if bias:`` on an optional HBM tensor, and on one the kernel
    allocated itself."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    scratch = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.hbm) if bias else None
    tile = nl.load(a)
    if bias:
        tile = nl.add(tile, nl.load(bias))
    if scratch:
        nl.store(scratch, value=tile)
        tile = nl.load(scratch)
    nl.store(out, value=tile)
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_hbm_tensors_are_true_in_if(device):
    x, b = rand(128, 16), rand(128, 16)
    tx, tb = on(device, x, b)
    np.testing.assert_allclose(add_optional_bias(tx).cpu().numpy(), x, rtol=1e-6)
    np.testing.assert_allclose(add_optional_bias(tx, tb).cpu().numpy(), x + b, rtol=1e-6)
    np.testing.assert_allclose(nki.simulate(add_optional_bias)(x, b), x + b, rtol=1e-6)


def test_a_tile_in_if_is_still_an_error():
    @nki.jit
    def branches_on_a_tile(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        tile = nl.load(a)
        if tile:
            tile = nl.add(tile, 1.0)
        nl.store(out, value=tile)
        return out

    with pytest.raises(NKIError, match="no truth value"):
        nki.simulate(branches_on_a_tile)(rand(128, 4))


@nki.jit
def transpose_via_reshape(a):
    """Copies ``a`` [128, 64] and returns the result's bytes as [64, 128]."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a))
    return out.reshape((a.shape[1], a.shape[0]))


@pytest.mark.parametrize("device", DEVICES)
def test_returning_a_reshape_of_a_kernel_allocated_tensor(device):
    x = rand(128, 64)
    (t,) = on(device, x)
    got = transpose_via_reshape(t)
    assert tuple(got.shape) == (64, 128)
    np.testing.assert_array_equal(got.cpu().numpy(), x.reshape(64, 128))
    np.testing.assert_array_equal(nki.simulate(transpose_via_reshape)(x), x.reshape(64, 128))


def test_a_flat_reshape_in_a_tuple_of_results():
    @nki.jit
    def copy_and_flat(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        flat = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        tile = nl.load(a)
        nl.store(out, value=tile)
        nl.store(flat, value=tile)
        return out, flat.reshape((a.shape[0] * a.shape[1],))

    x = rand(128, 4)
    got, flat = nki.simulate(copy_and_flat)(x)
    np.testing.assert_array_equal(got, x)
    np.testing.assert_array_equal(flat, x.reshape(-1))


def test_returning_part_of_a_tensor_or_one_tensor_twice_reshaped_are_errors():
    @nki.jit
    def returns_a_slice(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        return out[0:64, :]

    @nki.jit
    def returns_two_shapes(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        return out, out.reshape((a.shape[1], a.shape[0]))

    with pytest.raises(NKIError, match="whole tensors"):
        nki.simulate(returns_a_slice)(rand(128, 8))
    with pytest.raises(NKIError, match="two shapes"):
        nki.simulate(returns_two_shapes)(rand(128, 8))


# A column t[:, j] (a (P,) tile) where NKI takes a [P, 1] operand ----------------------
@nki.jit
def column_operands(a, b):
    P, F = a.shape
    x = nl.load(a)
    cols = nl.load(b)  # [P, 4]: per-partition bias and scale columns
    y = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=y, op=nl.exp, data=x, bias=cols[:, 1], scale=1.0)
    z = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=z, data=y, op0=nl.multiply, operand0=cols[:, 3])
    # A reduction into a column of a wider tile (a (P,) destination).
    sums = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=sums, value=0.0)
    row = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=row, op=nl.add, data=z, axis=1)
    nisa.tensor_copy(sums[:, 1], row)
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=z)
    out_sums = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out_sums, value=sums)
    return out, out_sums


@pytest.mark.parametrize("device", DEVICES)
def test_a_column_view_is_a_p_by_1_operand_and_destination(device):
    x, b = rand(128, 16), rand(128, 4)
    z, sums = column_operands(*on(device, x, b))
    want = np.exp(x + b[:, 1:2]) * b[:, 3:4]
    np.testing.assert_allclose(z.cpu().numpy(), want, rtol=1e-5)
    np.testing.assert_allclose(sums.cpu().numpy()[:, 1], want.sum(1), rtol=1e-5)
    np.testing.assert_array_equal(sums.cpu().numpy()[:, 0], 0.0)


@nki.jit
def column_into_wrong_width(a):
    x = nl.load(a)
    t = nl.ndarray((a.shape[0], 4), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(t[:, 1], x)  # [P, 8] into a column: not a [P, 1] value


def test_a_wider_value_into_a_column_is_still_a_shape_error():
    with pytest.raises(NKIError, match=r"cannot broadcast a tile of shape \[128, 8\] to \[128\]"):
        column_into_wrong_width(torch.zeros(128, 8, device="neuron"))


# nc_matmul(perf_mode=double_row) -----------------------------------------------------
@nki.jit
def double_row_matmul(a, b):
    # a: [K, 2, M], b: [K, 2, N] in FP8: each partition holds two contraction rows.
    K, _, M = a.shape
    N = b.shape[2]
    st = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    mv = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=st, src=a)
    nisa.dma_copy(dst=mv, src=b)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, st, mv, perf_mode=nisa.matmul_perf_mode.double_row)
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_double_row_matmul_contracts_both_rows_of_each_partition():
    a = torch.randn(64, 2, 32).to(torch.float8_e4m3fn)
    b = torch.randn(64, 2, 48).to(torch.float8_e4m3fn)
    got = double_row_matmul(a.to("neuron"), b.to("neuron")).cpu()
    want = torch.einsum("krm,krn->mn", a.float(), b.float())
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)


def test_double_row_matmul_wants_fp8_pairs():
    a = torch.randn(64, 2, 32)
    with pytest.raises(NKIError, match="double_row.*FP8 operands, stationary is float32"):
        double_row_matmul(a.to("neuron"), a.to("neuron"))
