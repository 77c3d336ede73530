"""NKI's two 8-bit E4M3 types, distinct as NKI documents them:

* ``nl.float8_e4m3``: IEEE-style (1S,4E,3M), bias 7, the top exponent holds
  ±inf (S.1111.000) and NaNs, max finite 240 (``ml_dtypes.float8_e4m3``; torch
  has no such type);
* ``nl.float8_e4m3fn``: extended range, no inf, NaN is S.1111.111, max 448
  (``torch.float8_e4m3fn``, ``ml_dtypes.float8_e4m3fn``).

The simulator converts fp32 to either rounding to nearest even and, as for
every fp8 type (docs/nki.md), saturating: finite overflow and ±inf become the
largest finite value of the sign (ml_dtypes would give inf for float8_e4m3 and
NaN for float8_e4m3fn); NaN stays NaN. Everything else is checked bit for bit
against ml_dtypes.
"""

import nki
import nki.dtype as nt
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch

ml_dtypes = pytest.importorskip("ml_dtypes")

# (NKI type, NumPy type, largest finite value)
TYPES = {
    "float8_e4m3": (nl.float8_e4m3, ml_dtypes.float8_e4m3, 240.0),
    "float8_e4m3fn": (nl.float8_e4m3fn, ml_dtypes.float8_e4m3fn, 448.0),
}


# The two types -------------------------------------------------------------------
def test_the_two_e4m3_types_are_distinct():
    e4m3, fn = nl.float8_e4m3, nl.float8_e4m3fn
    assert e4m3 != fn and not (e4m3 == fn)
    assert hash(e4m3) != hash(fn)
    assert str(e4m3) == "float8_e4m3" and str(fn) == "float8_e4m3fn"
    assert e4m3 == "float8_e4m3" and fn == "float8_e4m3fn"
    assert e4m3 != "float8_e4m3fn" and fn != "float8_e4m3"
    assert e4m3.code != fn.code and e4m3.itemsize == fn.itemsize == 1
    assert e4m3.is_float and e4m3.is_signed


def test_nkilib_clamp_table_keeps_both_entries():
    # NKI-lib builds this table at import and looks it up by a tile's dtype.
    table = {nl.float8_e4m3: 240.0, nl.float8_e4m3fn: 448.0, nl.float8_e5m2: 57344.0}
    assert len(table) == 3
    assert table[nl.float8_e4m3] == 240.0 and table[nl.float8_e4m3fn] == 448.0
    assert table[nt("float8_e4m3fn")] == 448.0


def test_numpy_and_torch_types_of_each():
    assert np.dtype(nl.float8_e4m3) == ml_dtypes.float8_e4m3
    assert np.dtype(nl.float8_e4m3fn) == ml_dtypes.float8_e4m3fn
    assert nl.float8_e4m3 == ml_dtypes.float8_e4m3 and nl.float8_e4m3 != ml_dtypes.float8_e4m3fn
    assert nl.float8_e4m3fn == ml_dtypes.float8_e4m3fn
    assert nl.float8_e4m3fn == torch.float8_e4m3fn and nl.float8_e4m3 != torch.float8_e4m3fn
    assert nt(torch.float8_e4m3fn) is nl.float8_e4m3fn
    assert nt(ml_dtypes.float8_e4m3) is nl.float8_e4m3
    assert nt(np.dtype(ml_dtypes.float8_e4m3fn)) is nl.float8_e4m3fn
    from torch_neuronx.nki import dtypes as dt

    assert dt.torch_dtype(nl.float8_e4m3fn) is torch.float8_e4m3fn
    # A result of e4m3 comes back in torch's float8_e4m3fn (same bytes: see
    # test_an_e4m3_result_is_a_float8_e4m3fn_tensor_of_its_values).
    assert dt.torch_dtype(nl.float8_e4m3) is torch.float8_e4m3fn


def test_aliases_finfo_promote_and_the_dtype_module():
    assert nt.float8_e4m3 is nl.float8_e4m3 and nt.float8_e4m3fn is nl.float8_e4m3fn
    assert nt("float8e4") is nl.float8_e4m3  # NKI's older name of float8_e4m3
    assert (
        nl.finfo(nl.float8_e4m3).max == 240.0 == float(ml_dtypes.finfo(ml_dtypes.float8_e4m3).max)
    )
    assert nl.finfo(nl.float8_e4m3fn).max == 448.0
    for name, (d, npd, _) in TYPES.items():
        fi, ref = nl.finfo(d), ml_dtypes.finfo(npd)
        assert (fi.min, fi.eps, fi.tiny) == (float(ref.min), float(ref.eps), float(ref.tiny)), name
    from torch_neuronx.nki import dtypes as dt

    assert dt.promote(nl.float8_e4m3, nl.float8_e4m3fn) is nl.float8_e4m3fn
    assert dt.promote(nl.float8_e4m3, nl.bfloat16) is nl.bfloat16
    assert dt.promote(nl.float8_e5m2, nl.float8_e4m3) is nl.float8_e4m3


# Conversions, bit for bit -----------------------------------------------------------
def _to_type(dtype):
    @nki.jit
    def to_type(x):
        out = nl.ndarray(x.shape, dtype=dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.copy(nl.load(x), dtype=dtype))
        return out

    return to_type


def _to_fp32(x):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.copy(nl.load(x), dtype=nl.float32))
    return out


to_fp32 = nki.jit(_to_fp32)


def _round_trip(dtype):
    @nki.jit
    def round_trip(x):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.copy(nl.load(x), dtype=dtype)  # an SBUF tile of the fp8 type
        nl.store(out, value=nl.copy(t, dtype=nl.float32))
        return out

    return round_trip


def _reference(x, npd, max_finite):
    """ml_dtypes' conversion, saturating as the simulator does (finite
    overflow and ±inf to ±max, NaN to NaN)."""
    return np.where(np.isnan(x), x, np.clip(x, -max_finite, max_finite)).astype(npd)


def _sweep(npd, max_finite):
    """fp32 values around every code of the type: the values, the midpoints
    (ties), one fp32 ulp either side of each, random values from below the
    smallest subnormal to past overflow, and the specials."""
    codes = np.arange(256, dtype=np.uint8).view(npd).astype(np.float32)
    v = np.unique(codes[np.isfinite(codes)])
    mids = ((v[:-1].astype(np.float64) + v[1:]) / 2).astype(np.float32)
    parts = [
        v,
        mids,
        np.nextafter(mids, np.float32(np.inf)),
        np.nextafter(mids, np.float32(-np.inf)),
        np.nextafter(v, np.float32(np.inf)),
        np.nextafter(v, np.float32(-np.inf)),
    ]
    rng = np.random.default_rng(7)
    mag = np.exp2(rng.uniform(-13, 12, 40000)).astype(np.float32)
    parts.append(mag * rng.choice([-1, 1], mag.size).astype(np.float32))
    top = np.float32(max_finite)
    parts.append(
        np.array(
            [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, top, -top, 1e30, -1e30, 3.4e38]
            + [max_finite * 1.03125, max_finite * 1.0625, 2.0**-10, -(2.0**-10), 3 * 2.0**-11]
            + [2.0**-30, -(2.0**-30), 1e-45],
            dtype=np.float32,
        )
    )
    x = np.concatenate(parts).astype(np.float32)
    x = np.concatenate([x, np.zeros((-x.size) % 128, np.float32)])
    return x.reshape(128, -1)


@pytest.mark.parametrize("name", sorted(TYPES))
def test_all_256_codes_decode_like_ml_dtypes(name):
    _, npd, _ = TYPES[name]
    x = np.arange(256, dtype=np.uint8).view(npd).reshape(128, 2)
    got = nki.simulate(to_fp32)(x)
    want = x.astype(np.float32)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))  # -0 too
    if name == "float8_e4m3":
        assert got.ravel()[0x78] == np.inf and got.ravel()[0xF8] == -np.inf
        assert got.ravel()[0x77] == 240.0 and np.isnan(got.ravel()[0x79:0x80]).all()
    else:
        assert got.ravel()[0x78] == 256.0 and got.ravel()[0x7E] == 448.0


@pytest.mark.parametrize("name", sorted(TYPES))
def test_fp32_sweep_encodes_like_ml_dtypes(name):
    d, npd, top = TYPES[name]
    x = _sweep(npd, top)
    got = nki.simulate(_to_type(d))(x)
    assert got.dtype == np.dtype(npd)
    want = _reference(x, npd, top)
    nan = np.isnan(x)
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan)
    bad = (got.view(np.uint8) != want.view(np.uint8)) & ~nan
    assert not bad.any(), list(zip(x[bad][:8], got[bad][:8], want[bad][:8], strict=True))


def test_e4m3_rounding_overflow_and_specials():
    e4m3 = _to_type(nl.float8_e4m3)
    x = np.zeros((128, 8), np.float32)
    x[0] = [1.0625, 1.1875, 247.9, 248.0, 1000.0, -np.inf, 2.0**-10, -(2.0**-12)]
    got = nki.simulate(e4m3)(x)[0]
    # ties to even; 248 (the tie between 240 and 256) and beyond saturate
    assert got.view(np.uint8).tolist() == [0x38, 0x3A, 0x77, 0x77, 0x77, 0xF7, 0x00, 0x80]
    fn = nki.simulate(_to_type(nl.float8_e4m3fn))(x)[0]
    assert fn.astype(np.float32).tolist()[2:6] == [240.0, 256.0, 448.0, -448.0]


# Kernels on each type ----------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(TYPES))
@pytest.mark.parametrize("device", ["cpu", "neuron"])
def test_round_trip_through_an_fp8_tile_on_torch_tensors(name, device):
    d, npd, top = TYPES[name]
    x = (np.random.default_rng(3).standard_normal((128, 64)) * 100).astype(np.float32)
    x[0, :4] = [500.0, -500.0, 241.0, 1e-4]
    got = _round_trip(d)(torch.from_numpy(x).to(device))
    assert got.device.type == device
    want = _reference(x, npd, top).astype(np.float32)
    np.testing.assert_array_equal(got.cpu().numpy(), want)
    assert got.abs().max().item() == top  # the clamp of each type


@pytest.mark.parametrize("name", sorted(TYPES))
def test_round_trip_on_numpy_arrays(name):
    d, npd, top = TYPES[name]
    x = (np.random.default_rng(4).standard_normal((128, 64)) * 100).astype(np.float32)
    got = nki.simulate(_round_trip(d))(x)
    np.testing.assert_array_equal(got, _reference(x, npd, top).astype(np.float32))


def test_e4m3fn_torch_tensors_describe_as_e4m3fn():
    seen = []

    @nki.jit
    def clamp_of(x):
        table = {nl.float8_e4m3: 240.0, nl.float8_e4m3fn: 448.0}
        seen.append((x.dtype, table[x.dtype]))
        return _to_fp32(x)

    x = torch.randn(128, 4).to(torch.float8_e4m3fn)
    got = clamp_of(x.to("neuron")).cpu()
    torch.testing.assert_close(got, x.float(), rtol=0, atol=0)
    assert seen[-1] == (nl.float8_e4m3fn, 448.0)
    a = x.float().numpy().astype(ml_dtypes.float8_e4m3)
    nki.simulate(clamp_of)(a)
    assert seen[-1] == (nl.float8_e4m3, 240.0)


def test_an_e4m3_result_is_a_float8_e4m3fn_tensor_of_its_values():
    # torch has no IEEE-style E4M3: the result holds e4m3's values (saturated
    # at 240, NaN kept) in torch's float8_e4m3fn, byte for byte.
    x = torch.tensor([[300.0, -1000.0, 0.1, float("nan")]] * 128)
    got = _to_type(nl.float8_e4m3)(x.to("neuron")).cpu()
    assert got.dtype == torch.float8_e4m3fn
    ref = x.numpy().clip(-240, 240).astype(ml_dtypes.float8_e4m3)
    assert np.array_equal(got.view(torch.uint8).numpy()[:, :3], ref.view(np.uint8)[:, :3])
    assert torch.isnan(got.float()[:, 3]).all()
    assert got.float()[0, :2].tolist() == [240.0, -240.0]
    # The fn type is torch's float8_e4m3fn and saturates at 448.
    got = _to_type(nl.float8_e4m3fn)(torch.full((128, 4), 300.0, device="neuron"))
    assert got.dtype == torch.float8_e4m3fn and got.float().max().item() == 288.0


# fp8 matmul with each type ---------------------------------------------------------
@nki.jit
def fp8_matmul(a, b):
    # a: [K, M], b: [K, N] in fp8 -> [M, N] fp32
    K, M = a.shape
    N = b.shape[1]
    st = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    mv = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=st, src=a)
    nisa.dma_copy(dst=mv, src=b)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, st, mv)
    res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=res)
    return out


@nki.jit
def fp8_double_row_matmul(a, b):
    K, _, M = a.shape
    N = b.shape[2]
    st = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    mv = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=st, src=a)
    nisa.dma_copy(dst=mv, src=b)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, st, mv, perf_mode=nisa.matmul_perf_mode.double_row)
    res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=res)
    return out


def _fp8(rng, shape, npd):
    return (rng.standard_normal(shape) * 8).astype(np.float32).astype(npd)


@pytest.mark.parametrize(
    "sa,sb",
    [
        ("float8_e4m3", "float8_e4m3"),
        ("float8_e4m3fn", "float8_e4m3fn"),
        ("float8_e4m3", "float8_e4m3fn"),
    ],
)
def test_fp8_matmul_with_each_type_on_numpy(sa, sb):
    rng = np.random.default_rng(5)
    a, b = _fp8(rng, (128, 64), TYPES[sa][1]), _fp8(rng, (128, 96), TYPES[sb][1])
    got = nki.simulate(fp8_matmul)(a, b)
    want = a.astype(np.float64).T @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("name", sorted(TYPES))
def test_fp8_double_row_matmul_with_each_type_on_numpy(name):
    npd = TYPES[name][1]
    rng = np.random.default_rng(6)
    a, b = _fp8(rng, (64, 2, 32), npd), _fp8(rng, (64, 2, 48), npd)
    got = nki.simulate(fp8_double_row_matmul)(a, b)
    want = np.einsum("krm,krn->mn", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)


def test_fp8_e4m3fn_matmul_on_neuron_tensors():
    a = (torch.randn(128, 64) * 8).to(torch.float8_e4m3fn)
    b = (torch.randn(128, 32) * 8).to(torch.float8_e4m3fn)
    got = fp8_matmul(a.to("neuron"), b.to("neuron")).cpu()
    torch.testing.assert_close(
        got, a.double().T @ b.double(), rtol=1e-5, atol=1e-3, check_dtype=False
    )
