"""MX (microscaling) numbers: the packed types ``nl.float8_e4m3fn_x4``,
``nl.float8_e5m2_x4``, ``nl.float4_e2m1fn_x4``, ``nisa.quantize_mx`` and
``nisa.nc_matmul_mx`` (NeuronCore-v4), and dtype views (``t.ap(...,
dtype=X)``), with kernels written here and NumPy references of the semantics
of NKI's pages (nki.isa.quantize_mx, nki.isa.nc_matmul_mx) and its MX matmul
guide (nki/deep-dives/mxfp-matmul): a scale per 8 partitions x 4 values, its
exponent the group's largest fp32 exponent less the type's largest (OCP MX
v1.0), values divided, saturated and rounded to nearest even; scales in the
first four partitions of each 32-partition quadrant."""

import ml_dtypes
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch

import torch_neuronx.nki as tnki
from torch_neuronx.nki import NKIError

RNG = np.random.default_rng(42)
FP8 = {"float8_e4m3fn_x4": ml_dtypes.float8_e4m3fn, "float8_e5m2_x4": ml_dtypes.float8_e5m2}
EMAX = {"float8_e4m3fn_x4": 8, "float8_e5m2_x4": 15}
VMAX = {"float8_e4m3fn_x4": 448.0, "float8_e5m2_x4": 57344.0}
X4 = {
    "float8_e4m3fn_x4": nl.float8_e4m3fn_x4,
    "float8_e5m2_x4": nl.float8_e5m2_x4,
    "float4_e2m1fn_x4": nl.float4_e2m1fn_x4,
}


# NumPy references ---------------------------------------------------------------------
def scale_row(p):
    return (p // 32) * 32 + (p % 32) // 8


def unpack(a: np.ndarray, name: str) -> np.ndarray:
    """Packed [P, F] (any 4- or 2-byte array) -> float32 [P, 4F]."""
    a = np.ascontiguousarray(a)
    if name == "float4_e2m1fn_x4":
        raw = a.view(np.uint16)
        nib = np.stack([(raw >> (4 * q)) & 0xF for q in range(4)], -1).astype(np.uint8)
        return nib.view(ml_dtypes.float4_e2m1fn).astype(np.float32).reshape(raw.shape[0], -1)
    return a.view(np.uint32).view(np.uint8).view(FP8[name]).astype(np.float32)


def pack(codes: np.ndarray, name: str) -> np.ndarray:
    """Element codes [P, 4F] (uint8: fp8 bytes or fp4 nibbles) -> [P, F] packed."""
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    if name == "float4_e2m1fn_x4":
        nib = codes.reshape(codes.shape[0], -1, 4).astype(np.uint16)
        out = sum(nib[..., q] << (4 * q) for q in range(4)).astype(np.uint16)
        return out.view(np.dtype(nl.float4_e2m1fn_x4))
    return codes.view(np.uint32).view(np.dtype(X4[name]))


def ref_quantize(x: np.ndarray, name: str):
    """(packed data as uint32 [P, F], scale tile [P, F] uint8) of src [P, 4F]."""
    x = x.astype(np.float32)
    p, f4 = x.shape
    f = f4 // 4
    e = (x.view(np.uint32) >> 23) & 0xFF
    g = e.reshape(p // 8, 8, f, 4).max(axis=(1, 3)).astype(np.int64)
    s = np.clip(g - EMAX[name], 0, 254)
    scale = np.repeat(np.repeat(2.0 ** (s - 127.0), 8, axis=0), 4, axis=1)
    q = np.clip(x.astype(np.float64) / scale, -VMAX[name], VMAX[name])
    codes = q.astype(np.float32).astype(FP8[name])
    tile = np.zeros((p, f), np.uint8)
    for grp in range(p // 8):
        tile[scale_row(8 * grp)] = s[grp]
    return codes, tile


def ref_matmul(st, st_scale, mv, mv_scale, st_name, mv_name):
    """stationary [K, M] x4 (packed), moving [K, N], scale tiles in quadrant
    layout -> [M, N] float64."""
    k = st.shape[0]
    rows = [scale_row(i) for i in range(k)]

    def values(a, sc, name):
        v = unpack(a, name).astype(np.float64).reshape(k, a.shape[1], 4)
        s = 2.0 ** (sc[rows, : a.shape[1]].astype(np.float64) - 127)
        return v * s[:, :, None]

    return np.einsum("kmq,knq->mn", values(st, st_scale, st_name), values(mv, mv_scale, mv_name))


def scale_tile(k, free, lo=118, hi=134):
    """A scale tile in quadrant layout with random scales (others 0)."""
    tile = np.zeros((k if k > 32 else k // 8, free), np.uint8)
    for p in range(0, k, 8):
        tile[scale_row(p)] = RNG.integers(lo, hi, free)
    return tile


def random_codes(k, n4, name):
    """Finite element codes [k, n4] of the type (no NaN/inf)."""
    if name == "float4_e2m1fn_x4":
        return RNG.integers(0, 16, (k, n4)).astype(np.uint8)
    vals = RNG.standard_normal((k, n4)).astype(np.float32) * 4
    return vals.astype(FP8[name]).view(np.uint8)


# Kernels ------------------------------------------------------------------------------
@nki.jit
def copy_kernel(x):
    """HBM -> SBUF -> HBM of an MX packed tensor."""
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    u = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=u, src=t)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=u)
    return out


@nki.jit
def view_kernel(x, mx_dtype):
    """A uint8 HBM tensor [P, 4F] viewed as MX x4 [P, F] (NKI's MX guide)."""
    p, f4 = x.shape
    f = f4 * 1 // mx_dtype.itemsize
    t = nl.ndarray((p, f), dtype=mx_dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap(pattern=[[f, p], [1, f]], dtype=mx_dtype))
    out = nl.ndarray((p, f), dtype=mx_dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def quantize_kernel(src, mx_dtype, scale_rows):
    p, f4 = src.shape
    s = nl.ndarray((p, f4), dtype=src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=src)
    d = nl.ndarray((p, f4 // 4), dtype=mx_dtype, buffer=nl.sbuf)
    sc = nl.ndarray((scale_rows, f4 // 4), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.quantize_mx(dst=d, src=s, dst_scale=sc)
    od = nl.ndarray(d.shape, dtype=mx_dtype, buffer=nl.shared_hbm)
    osc = nl.ndarray(sc.shape, dtype=nl.uint8, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=od, src=d)
    nisa.dma_copy(dst=osc, src=sc)
    return od, osc


@nki.jit
def matmul_kernel(st, st_scale, mv, mv_scale, out_dtype, repeat):
    def load(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        return t

    s, ss, m, ms = load(st), load(st_scale), load(mv), load(mv_scale)
    p = nl.ndarray((st.shape[1], mv.shape[1]), dtype=out_dtype, buffer=nl.psum)
    for _ in range(repeat):  # the first overwrites, the next accumulate
        nisa.nc_matmul_mx(dst=p, stationary=s, moving=m, stationary_scale=ss, moving_scale=ms)
    o = nl.ndarray(p.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=o, src=p)
    out = nl.ndarray(p.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=o)
    return out


@nki.jit
def quantize_matmul_kernel(a, b):
    """a [K, 4M], b [K, 4N] bf16 (interleaved layout): both quantized on chip
    to MXFP8, then multiplied: [M, N]."""
    k = a.shape[0]

    def quantize(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        d = nl.ndarray((k, x.shape[1] // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        sc = nl.ndarray((k, x.shape[1] // 4), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.quantize_mx(dst=d, src=t, dst_scale=sc)
        return d, sc

    ad, asc = quantize(a)
    bd, bsc = quantize(b)
    p = nl.ndarray((ad.shape[1], bd.shape[1]), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=p, stationary=ad, moving=bd, stationary_scale=asc, moving_scale=bsc)
    o = nl.ndarray(p.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=o, src=p)
    out = nl.ndarray(p.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=o)
    return out


# Types and round trips ----------------------------------------------------------------
@pytest.mark.parametrize("name", list(X4))
def test_types(name):
    d = X4[name]
    size = 2 if name.startswith("float4") else 4
    assert str(d) == name and d.itemsize == size
    a = np.zeros((3, 5), dtype=d)
    assert str(a.dtype) == name and a.dtype.itemsize == size
    assert a.view(np.uint16 if size == 2 else np.uint32).shape == (3, 5)
    with pytest.raises(TypeError):
        a.astype(np.float32)  # four numbers an element: no cast
    assert tnki.dtypes.as_dtype(a.dtype) == d


@pytest.mark.parametrize("name", list(X4))
def test_every_bit_pattern_round_trips(name):
    # Every code of the element type (NaN and inf included) in a block of
    # [8 partitions, 4 values]: DMAs and copies move their bits.
    n = 16 if name.startswith("float4") else 256
    codes = np.resize(np.arange(n, dtype=np.uint8), 32 * ((n + 31) // 32))
    codes = codes.reshape(-1, 4 * ((len(codes) // 8 + 3) // 4))
    codes = np.resize(codes, (8, 4 * max(1, codes.size // 32)))
    packed = pack(codes, name)
    out = nki.simulate_kernel(copy_kernel, packed)
    assert out.dtype == packed.dtype and out.tobytes() == packed.tobytes()
    # The same bytes as uint8, viewed in the kernel (NKI's MX guide).
    raw = packed.view(np.uint8).reshape(8, -1)
    viewed = nki.simulate_kernel(view_kernel, raw, X4[name])
    assert viewed.tobytes() == packed.tobytes()


@pytest.mark.parametrize("name", list(X4))
def test_every_finite_value_decodes(name):
    # nc_matmul_mx against a one-hot moving matrix reads each value of the
    # stationary one: all finite codes of the type, scaled by 2^(s - 127).
    if name.startswith("float4"):
        finite = np.arange(16, dtype=np.uint8)
    else:
        vals = np.arange(256, dtype=np.uint8).view(FP8[name]).astype(np.float32)
        finite = np.arange(256, dtype=np.uint8)[np.isfinite(vals)]
    k, m = 8, (len(finite) + 31) // 32
    codes = np.resize(finite, (k, 4 * m))
    st = pack(codes, name)
    one = {"float4_e2m1fn_x4": 2}.get(name, None)  # the code of 1.0
    one = one if one is not None else int(np.array(1.0, FP8[name]).view(np.uint8))
    mv_codes = np.zeros((k, 4 * 32), np.uint8)
    for kk in range(k):
        for q in range(4):
            mv_codes[kk, 4 * (4 * kk + q) + q] = one  # column 4k+q picks (k, q)
    mv = pack(mv_codes, name)
    st_scale = np.full((1, m), 130, np.uint8)
    mv_scale = np.full((1, 32), 127, np.uint8)
    out = nki.simulate_kernel(matmul_kernel, st, st_scale, mv, mv_scale, nl.float32, 1)
    expect = unpack(st, name).reshape(k, m, 4).transpose(1, 0, 2).reshape(m, 32) * 8.0
    np.testing.assert_array_equal(out, expect)


# quantize_mx --------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["float8_e4m3fn_x4", "float8_e5m2_x4"])
@pytest.mark.parametrize("src_dtype", [ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize("p,f4", [(32, 4), (64, 256), (128, 512)])
def test_quantize_mx_matches_reference(name, src_dtype, p, f4):
    x = (RNG.standard_normal((p, f4)) * np.exp(RNG.uniform(-6, 6, (p, 1)))).astype(src_dtype)
    if p >= 64:
        x[:8, :4] = 0  # an all-zero group: scale 0
        x[8:16, 4:8] = src_dtype(60000.0)  # the largest exponents
        x[16, 8] = np.nan
        x[24, 12] = -np.inf
    data, scales = nki.simulate_kernel(quantize_kernel, x, X4[name], p)
    codes, tile = ref_quantize(x.astype(np.float32), name)
    np.testing.assert_array_equal(scales, tile)
    got = data.view(np.uint8).reshape(p, f4)
    want = codes.view(np.uint8)
    gv, wv = got.view(FP8[name]).astype(np.float32), codes.astype(np.float32)
    nan = np.isnan(wv)
    np.testing.assert_array_equal(np.isnan(gv), nan)
    np.testing.assert_array_equal(got[~nan], want[~nan])


def test_quantize_mx_dense_scales_and_saturation():
    # P <= 32: a [P // 8, F] scale tile; values at the largest exponent of a
    # group round up past the type's largest and saturate to it (448).
    x = np.full((32, 4), 1.0, np.float32)
    x[0, 0] = 1.99  # exponent 0 -> scale 127 - 8; 1.99 * 256 = 509 -> 448
    data, scales = nki.simulate_kernel(
        quantize_kernel, x.astype(ml_dtypes.bfloat16), nl.float8_e4m3fn_x4, 4
    )
    assert scales.shape == (4, 1) and (scales == 119).all()
    vals = unpack(data, "float8_e4m3fn_x4")
    assert vals[0, 0] == 448.0 and vals[1, 0] == 256.0


# nc_matmul_mx -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "st_name,mv_name,k,m,n",
    [
        ("float8_e4m3fn_x4", "float8_e4m3fn_x4", 128, 128, 512),
        ("float8_e5m2_x4", "float8_e5m2_x4", 64, 32, 96),
        ("float4_e2m1fn_x4", "float4_e2m1fn_x4", 32, 16, 64),
        ("float4_e2m1fn_x4", "float8_e5m2_x4", 96, 24, 40),
    ],
)
def test_nc_matmul_mx_matches_reference(st_name, mv_name, k, m, n):
    st = pack(random_codes(k, 4 * m, st_name), st_name)
    mv = pack(random_codes(k, 4 * n, mv_name), mv_name)
    ss, ms = scale_tile(k, m), scale_tile(k, n)
    out = nki.simulate_kernel(matmul_kernel, st, ss, mv, ms, nl.float32, 2)
    want = 2 * ref_matmul(st, ss, mv, ms, st_name, mv_name)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_nc_matmul_mx_bf16_result_and_extra_scale_columns():
    name = "float8_e4m3fn_x4"
    st = pack(random_codes(32, 64, name), name)
    mv = pack(random_codes(32, 128, name), name)
    # One scale tile may hold more columns than the matrix (NKI's guide).
    ss, ms = scale_tile(32, 40), scale_tile(32, 32)
    out = nki.simulate_kernel(matmul_kernel, st, ss, mv, ms, nl.bfloat16, 1)
    want = ref_matmul(st, ss, mv, ms, name, name)
    want_bf16 = want.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_allclose(out, want_bf16, rtol=1e-2)


def test_quantize_then_matmul():
    k, m, n = 128, 32, 64
    a = RNG.standard_normal((k, 4 * m)).astype(ml_dtypes.bfloat16)
    b = RNG.standard_normal((k, 4 * n)).astype(ml_dtypes.bfloat16)
    out = nki.simulate_kernel(quantize_matmul_kernel, a, b)
    (ac, asc), (bc, bsc) = ref_quantize(a, "float8_e4m3fn_x4"), ref_quantize(b, "float8_e4m3fn_x4")
    a_x4 = pack(ac.view(np.uint8), "float8_e4m3fn_x4")
    b_x4 = pack(bc.view(np.uint8), "float8_e4m3fn_x4")
    want = ref_matmul(a_x4, asc, b_x4, bsc, "float8_e4m3fn_x4", "float8_e4m3fn_x4")
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    # MXFP8 is close to the exact product of the bf16 inputs.
    exact = np.einsum(
        "kmq,knq->mn",
        a.astype(np.float64).reshape(k, m, 4),
        b.astype(np.float64).reshape(k, n, 4),
    )
    assert np.abs(out - exact).max() < 0.1 * np.abs(exact).max()


def test_on_neuron_tensors():
    # Torch has no MX types: containers (uint32) tagged with nki_dtype in,
    # and results of an MX type come back so.
    name = "float8_e5m2_x4"
    st = pack(random_codes(32, 32, name), name)
    mv = pack(random_codes(32, 64, name), name)
    ss, ms = scale_tile(32, 8), scale_tile(32, 16)

    def dev(a):
        return torch.from_numpy(np.ascontiguousarray(a)).to("neuron")

    st_t, mv_t = dev(st.view(np.uint32)), dev(mv.view(np.uint32))
    st_t.nki_dtype = mv_t.nki_dtype = nl.float8_e5m2_x4
    out = matmul_kernel(st_t, dev(ss), mv_t, dev(ms), nl.float32, 1)
    want = ref_matmul(st, ss, mv, ms, name, name)
    np.testing.assert_allclose(out.cpu().numpy(), want, rtol=1e-5, atol=1e-6 * np.abs(want).max())
    back = copy_kernel(st_t)
    assert back.dtype == torch.uint32 and back.nki_dtype == nl.float8_e5m2_x4
    assert np.array_equal(back.cpu().numpy(), st.view(np.uint32))


# Dtype views --------------------------------------------------------------------------
@nki.jit
def pairs_kernel(x):
    """bf16 [P, 2F] read as fp32 [P, F] (pairs of bf16), copied through
    SBUF and PSUM as fp32, then read back as bf16 by quantize_mx."""
    p, f2 = x.shape
    f = f2 // 2
    t = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap(pattern=[[f, p], [1, f]], dtype=nl.float32))
    d = nl.ndarray((p, f2 // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    sc = nl.ndarray((p, f2 // 4), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.quantize_mx(dst=d, src=t.ap(pattern=[[f2, p], [1, f2]], dtype=nl.bfloat16), dst_scale=sc)
    od = nl.ndarray(d.shape, dtype=d.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=od, src=d)
    return od


def test_dtype_views():
    x = RNG.standard_normal((32, 64)).astype(ml_dtypes.bfloat16)
    out = nki.simulate_kernel(pairs_kernel, x)
    codes, _ = ref_quantize(x.astype(np.float32), "float8_e4m3fn_x4")
    assert out.view(np.uint8).tobytes() == codes.view(np.uint8).tobytes()
    # The reinterpreting copies of a view are free in the estimate.
    prof = pairs_kernel.last_profile
    assert prof is not None


# Cost ---------------------------------------------------------------------------------
def test_matmul_mx_costs_a_bf16_matmul_of_its_shapes():
    # NKI's MX guide: four FP8/FP4 MACs per PE, 4x BF16's throughput: an x4
    # [128, 128] x [128, 512] matmul takes what a BF16 one of those shapes
    # takes (512 moving columns).
    name = "float8_e4m3fn_x4"
    st = pack(random_codes(128, 512, name), name)
    mv = pack(random_codes(128, 2048, name), name)
    nki.simulate_kernel(
        matmul_kernel, st, scale_tile(128, 128), mv, scale_tile(128, 512), nl.float32, 4
    )
    mx = matmul_kernel.last_profile

    @nki.jit
    def bf16_kernel(a, b):
        s = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=a)
        m = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=m, src=b)
        p = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        for _ in range(4):
            nisa.nc_matmul(dst=p, stationary=s, moving=m)
        o = nl.ndarray(p.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=o, src=p)
        out = nl.ndarray(p.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=o)
        return out

    a = np.zeros((128, 128), ml_dtypes.bfloat16)
    b = np.zeros((128, 512), ml_dtypes.bfloat16)
    nki.simulate_kernel(bf16_kernel, a, b)
    bf = bf16_kernel.last_profile
    assert mx.busy_us["tensor"] == pytest.approx(bf.busy_us["tensor"])
    assert mx.matmul_flops == 4 * bf.matmul_flops


# Errors -------------------------------------------------------------------------------
def _quantize_error(src_shape, src_dtype, dst_dtype, scale_shape, dst_shape=None):
    @nki.jit
    def k(x):
        s = nl.ndarray(src_shape, dtype=src_dtype, buffer=nl.sbuf)
        nisa.memset(dst=s, value=0)
        d = nl.ndarray(
            dst_shape or (src_shape[0], src_shape[1] // 4), dtype=dst_dtype, buffer=nl.sbuf
        )
        sc = nl.ndarray(scale_shape, dtype=nl.uint8, buffer=nl.sbuf)
        nisa.quantize_mx(dst=d, src=s, dst_scale=sc)
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x)
        return out

    with pytest.raises(NKIError) as e:
        nki.simulate_kernel(k, np.zeros((1, 1), np.float32))
    return str(e.value)


def test_quantize_mx_errors():
    bf16, e4 = nl.bfloat16, nl.float8_e4m3fn_x4
    assert "multiple of 32" in _quantize_error((16, 8), bf16, e4, (2, 2))
    assert "MXFP8 only" in _quantize_error((32, 8), bf16, nl.float4_e2m1fn_x4, (4, 2))
    assert "bfloat16 or float16" in _quantize_error((32, 8), nl.float32, e4, (4, 2))
    assert "does not hold the scales" in _quantize_error((64, 8), bf16, e4, (8, 2))
    assert "4 values per element" in _quantize_error((32, 8), bf16, e4, (4, 2), (32, 3))


def test_matmul_mx_errors():
    name = "float8_e4m3fn_x4"
    st = pack(random_codes(32, 32, name), name)
    mv = pack(random_codes(64, 32, name), name)
    with pytest.raises(NKIError, match="contraction"):
        nki.simulate_kernel(
            matmul_kernel, st, scale_tile(32, 8), mv, scale_tile(64, 8), nl.float32, 1
        )
    with pytest.raises(NKIError, match="dst is int32"):
        nki.simulate_kernel(
            matmul_kernel, st, scale_tile(32, 8), st, scale_tile(32, 8), nl.int32, 1
        )


def test_packed_tiles_take_no_arithmetic():
    @nki.jit
    def add(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        u = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=u, data1=t, data2=t, op=nl.add)
        return t

    @nki.jit
    def to_float(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        u = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=u, src=t)
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=u)
        return out

    x = np.zeros((8, 4), dtype=nl.float8_e4m3fn_x4)
    with pytest.raises(NKIError, match="no arithmetic"):
        nki.simulate_kernel(add, x)
    with pytest.raises(NKIError, match="same packed type"):
        nki.simulate_kernel(to_float, x)


@nki.jit
def tile_view_kernel(x):
    """A uint8 tile viewed whole as MX x4 (``t.view(dtype)``)."""
    t = nl.ndarray(x.shape, dtype=nl.uint8, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    v = t.view(nl.float4_e2m1fn_x4)
    out = nl.ndarray(v.shape, dtype=v.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=v)
    return out


def test_tile_view():
    x = RNG.integers(0, 256, (16, 8)).astype(np.uint8)
    out = nki.simulate_kernel(tile_view_kernel, x)
    assert out.shape == (16, 4) and str(out.dtype) == "float4_e2m1fn_x4"
    assert out.tobytes() == x.tobytes()


@nki.jit
def overwritten_kernel(x):
    """Stores a tile whose last rows were never written, then zeros over
    them (NKI-lib's MX projection wrapper): no undefined value reaches the
    result."""
    t = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[0:4, :], src=x)
    out = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    z = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=z, value=0.0)
    nisa.dma_copy(dst=out[4:8, :], src=z)
    return out


def test_undefined_values_overwritten_before_the_end():
    x = np.ones((4, 4), np.float32)
    out = nki.simulate_kernel(overwritten_kernel, x)
    assert (out[:4] == 1).all() and (out[4:] == 0).all()
