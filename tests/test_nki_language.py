"""The NKI language on the simulator: every construct against a NumPy
reference, on NumPy arrays and on neuron tensors."""

import neuronxcc.nki.isa as lisa
import neuronxcc.nki.typing as nt
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch

import torch_neuronx.nki as tnki

RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# Data movement and indexing ---------------------------------------------------------
@nki.jit
def spmd_add(a_input, b_input):
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iy = nl.program_id(1) * 512 + nl.arange(512)[None, :]
    a_tile = nl.load(a_input[ix, iy])
    b_tile = nl.load(b_input[ix, iy])
    nl.store(c_output[ix, iy], value=a_tile + b_tile)
    return c_output


def test_spmd_tensor_add_numpy_and_neuron():
    a, b = rand(256, 1024, dtype=np.float16), rand(256, 1024, dtype=np.float16)
    out = spmd_add[2, 2](a, b)
    np.testing.assert_allclose(out, a + b, rtol=1e-3, atol=1e-3)
    ta, tb = torch.from_numpy(a).to("neuron"), torch.from_numpy(b).to("neuron")
    tout = spmd_add[2, 2](ta, tb)
    assert tout.device.type == "neuron"
    torch.testing.assert_close(tout.cpu(), torch.from_numpy(a) + torch.from_numpy(b))


@nki.jit
def mgrid_copy(a):
    out = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.mgrid[0 : a.shape[0], 0 : a.shape[1]]
    t = nl.load(a[i.p, i.x])
    nl.store(out, value=nl.transpose(t))
    return out


def test_mgrid_and_pe_transpose():
    a = rand(64, 96)
    np.testing.assert_array_equal(mgrid_copy(a), a.T)


@nki.jit
def transpose2d(in_tensor, shape2d):
    out_tensor = nl.ndarray(in_tensor.shape, dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    sz_p, _ = in_tensor.shape
    in_tile = nl.load(in_tensor)
    sz_f1, sz_f2 = shape2d
    i_p0 = nl.arange(sz_p)[:, None, None]
    i_f1 = nl.arange(sz_f1)[None, :, None]
    i_f2 = nl.arange(sz_f2)[None, None, :]
    out_tile = nl.ndarray(shape=(sz_p, sz_f2 * sz_f1), dtype=out_tensor.dtype)
    out_tile[i_p0, i_f2 * sz_f1 + i_f1] = nl.copy(in_tile[i_p0, i_f1 * sz_f2 + i_f2])
    nl.store(out_tensor, value=out_tile)
    return out_tensor


def test_free_dim_transpose_with_3d_index_grids():
    a = np.arange(5 * 3 * 4, dtype=np.int8).reshape((5, 12))
    out = transpose2d(a, (3, 4))
    np.testing.assert_array_equal(out, a.reshape(5, 3, 4).transpose(0, 2, 1).reshape(5, 12))


@nki.jit
def avgpool(in_tensor, pool):
    c, h, w = in_tensor.shape
    out = nl.ndarray((c, h // pool, w // pool), dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    i0, i1, i2, i3, i4 = nl.mgrid[0:c, 0 : h // pool, 0:pool, 0 : w // pool, 0:pool]
    in_tile = nl.load(in_tensor)
    s = nl.sum(in_tile[i0, pool * i1 + i2, pool * i3 + i4], axis=[2, 4])
    nl.store(out, value=s / (pool * pool))
    return out


def test_avgpool_reduces_non_adjacent_axes():
    x = np.arange(2 * 6 * 6, dtype=np.float32).reshape(2, 6, 6)
    ref = x.reshape(2, 3, 2, 3, 2).mean(axis=(2, 4))
    np.testing.assert_allclose(avgpool(x, 2), ref, rtol=1e-6)


@nki.jit
def masked_softmax(a_tensor):
    out = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    num_rows = a_tensor.shape[0]
    ix, iy = nl.mgrid[0:128, 0 : a_tensor.shape[1]]
    for i in nl.affine_range((num_rows + 127) // 128):
        m = i * 128 + ix < num_rows
        a_tile = nl.load(a_tensor[i * 128 + ix, iy], mask=m)
        max_vals = nl.max(a_tile, axis=[1], keepdims=True, mask=m)
        shifted = nl.subtract(a_tile, max_vals, mask=m)
        numerator = nl.exp(shifted)  # unmasked: reads the undefined tail rows
        denominator = nl.sum(numerator, axis=[1])
        nl.store(out[i * 128 + ix, iy], value=numerator / denominator, mask=m)
    return out


def test_masks_and_reductions_softmax_tail_rows():
    # 200 rows: the second tile's last 56 rows are masked off; computing on
    # them is fine as long as nothing undefined is stored.
    a = rand(200, 64)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(masked_softmax(a), e / e.sum(axis=1, keepdims=True), rtol=1e-5)


@nki.jit
def new_api_matmul(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            ps = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                lt = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
                rt = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lt, src=lhsT[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
                nisa.dma_copy(dst=rt, src=rhs[k * 128 : (k + 1) * 128, n * 512 : (n + 1) * 512])
                nisa.nc_matmul(dst=ps, stationary=lt, moving=rt)  # accumulates after the 1st
            sb = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=sb, src=ps)
            nisa.dma_copy(dst=res[m * 128 : (m + 1) * 128, n * 512 : (n + 1) * 512], src=sb)
    return res


@nki.jit
def legacy_matmul(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            res_psum = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                lhs_tile = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
                lhs_tile[...] = nl.load(lhsT[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
                rhs_tile = nl.load(rhs[k * 128 : (k + 1) * 128, n * 512 : (n + 1) * 512])
                res_psum += nl.matmul(lhs_tile[...], rhs_tile, transpose_x=True)
            res_sb = nl.copy(res_psum, dtype=result.dtype)
            nl.store(result[m * 128 : (m + 1) * 128, n * 512 : (n + 1) * 512], value=res_sb)
    return result


@pytest.mark.parametrize("kernel", [new_api_matmul, legacy_matmul])
def test_tiled_matmul_accumulates_in_psum(kernel):
    a, b = rand(384, 256), rand(384, 1024)
    np.testing.assert_allclose(kernel(a, b), a.T @ b, rtol=1e-4, atol=1e-3)
    # One instruction per matmul: the += accumulates in place.
    assert kernel.last_profile.instructions["tensor"] == 3 * 2 * 2


def test_bf16_matmul_matches_torch_on_neuron():
    a = torch.randn(256, 128, dtype=torch.bfloat16)
    b = torch.randn(256, 512, dtype=torch.bfloat16)
    out = new_api_matmul(a.to("neuron"), b.to("neuron")).cpu()
    torch.testing.assert_close(out, a.float().T @ b.float(), rtol=1e-4, atol=1e-3)


@nki.jit
def plain_matmul(x, y):
    out = nl.ndarray((x.shape[0], y.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.matmul(nl.load(x), nl.load(y)))
    return out


def test_matmul_without_transpose_x():
    x, y = rand(96, 64), rand(64, 200)
    np.testing.assert_allclose(plain_matmul(x, y), x @ y, rtol=1e-4, atol=1e-4)


# Element-wise, activation, reductions ------------------------------------------------
def _unary_kernel(fn):
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=fn(nl.load(x)))
        return out

    return k


@pytest.mark.parametrize(
    "fn,ref",
    [
        (nl.exp, np.exp),
        (nl.tanh, np.tanh),
        (nl.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
        (nl.relu, lambda x: np.maximum(x, 0)),
        (nl.silu, lambda x: x / (1 + np.exp(-x))),
        (nl.square, np.square),
        (nl.abs, np.abs),
        (nl.negative, np.negative),
        (nl.sin, np.sin),
        (nl.cos, np.cos),
        (nl.floor, np.floor),
        (nl.sign, np.sign),
        (nl.gelu_apprx_tanh, lambda x: 0.5 * x * (1 + np.tanh(0.79788456 * (x + 0.044715 * x**3)))),
    ],
)
def test_unary_functions(fn, ref):
    x = rand(128, 40)
    np.testing.assert_allclose(_unary_kernel(fn)(x), ref(x), rtol=2e-5, atol=2e-6)


def test_positive_domain_functions():
    x = np.abs(rand(64, 32)) + 0.1
    for fn, ref in [
        (nl.log, np.log),
        (nl.sqrt, np.sqrt),
        (nl.rsqrt, lambda v: 1 / np.sqrt(v)),
        (nl.reciprocal, lambda v: 1 / v),
    ]:
        np.testing.assert_allclose(_unary_kernel(fn)(x), ref(x), rtol=2e-5)


@nki.jit
def binary_ops(x, y):
    out = nl.ndarray((8,) + x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    a, b = nl.load(x), nl.load(y)
    for k, r in enumerate(
        [
            nl.add(a, b),
            a - b,
            a * b,
            a / b,
            nl.maximum(a, b),
            nl.minimum(a, b),
            nl.greater(a, b),
            3.0 - a,
        ]
    ):
        nl.store(out[k], value=r)
    return out


def test_binary_ops_and_scalars():
    x, y = rand(32, 16), np.abs(rand(32, 16)) + 0.5
    out = binary_ops(x, y)
    refs = [x + y, x - y, x * y, x / y, np.maximum(x, y), np.minimum(x, y), x > y, 3.0 - x]
    for o, r in zip(out, refs, strict=True):
        np.testing.assert_allclose(o, r, rtol=1e-6)


@nki.jit
def reductions(x):
    out = nl.ndarray((x.shape[0], 5), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    r = nl.ndarray((x.shape[0], 5), dtype=nl.float32)
    r[:, 0:1] = nl.sum(t, axis=1, keepdims=True)
    r[:, 1:2] = nl.max(t, axis=[1], keepdims=True)
    r[:, 2:3] = nl.min(t, axis=1, keepdims=True)
    r[:, 3:4] = nl.mean(t, axis=1, keepdims=True)
    r[:, 4:5] = lisa.tensor_reduce(np.max, t, axis=(1,), negate=True, keepdims=True)
    nl.store(out, value=r)
    return out


def test_reductions():
    x = rand(100, 70)
    out = reductions(x)
    ref = np.stack([x.sum(1), x.max(1), x.min(1), x.mean(1), -x.max(1)], axis=1)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@nki.jit
def isa_ops(x, bias):
    P, F = x.shape
    out = nl.ndarray((6, P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    b = nl.load(bias)  # (P, 1)
    nl.store(out[0], value=lisa.activation(nl.exp, t, bias=b, scale=0.5))
    nl.store(out[1], value=lisa.tensor_scalar(t, np.subtract, b, op1=np.multiply, operand1=2.0))
    nl.store(out[2], value=lisa.tensor_scalar(t, nl.subtract, 1.0, reverse0=True))
    nl.store(out[3], value=lisa.iota(nl.arange(P)[:, None] * F + nl.arange(F)[None, :], nl.int32))
    i_p, i_f = nl.mgrid[0:P, 0:F]
    nl.store(out[4], value=lisa.affine_select(i_p >= i_f, t, -9984.0))
    nl.store(out[5], value=lisa.tensor_tensor_scan(t, t, 0.0, np.multiply, np.add))
    return out


def test_isa_activation_tensor_scalar_iota_affine_select_scan():
    x, bias = rand(16, 16), rand(16, 1)
    out = isa_ops(x, bias)
    np.testing.assert_allclose(out[0], np.exp(x * 0.5 + bias), rtol=1e-5)
    np.testing.assert_allclose(out[1], (x - bias) * 2.0, rtol=1e-6)
    np.testing.assert_allclose(out[2], 1.0 - x, rtol=1e-6)
    np.testing.assert_array_equal(out[3], np.arange(256).reshape(16, 16))
    causal = np.tril(np.ones((16, 16), bool))
    np.testing.assert_array_equal(out[4], np.where(causal, x, -9984.0))
    scan = np.zeros_like(x)
    prev = np.zeros(16, np.float32)
    for j in range(16):  # res[j] = res[j-1] * x[j] + x[j]
        prev = prev * x[:, j] + x[:, j]
        scan[:, j] = prev
    np.testing.assert_allclose(out[5], scan, rtol=1e-4, atol=1e-5)


@nki.jit
def bn_layernorm(x, eps):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    stats = lisa.bn_stats(t)
    mv = lisa.bn_aggr(stats)
    mean = mv[:, 0:1]
    var = mv[:, 1:2]
    rstd = nl.rsqrt(var + eps)
    nl.store(out, value=lisa.tensor_scalar(t, np.subtract, mean, op1=np.multiply, operand1=rstd))
    return out


def test_bn_stats_bn_aggr():
    x = rand(128, 300) * 3 + 1
    ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(bn_layernorm(x, 1e-5), ref, rtol=1e-4, atol=1e-4)


@nki.jit
def where_and_memset(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    z = lisa.memset(x.shape, 7.0, nl.float32)
    nl.store(out, value=nl.where(t > 0.0, t, z))
    return out


def test_where_and_memset():
    x = rand(8, 8)
    np.testing.assert_array_equal(where_and_memset(x), np.where(x > 0, x, 7.0))


@nki.jit
def dma_skip(a, n):
    out = nl.zeros((128, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.zeros((128, a.shape[1]), dtype=a.dtype)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(a.shape[1])[None, :]
    lisa.dma_copy(dst=t[i_p, i_f], src=a[n + i_p, i_f], oob_mode=lisa.oob_mode.skip)
    nisa.dma_copy(dst=out, src=t, dst_rmw_op=np.add)
    return out


def test_dma_oob_skip_and_accumulate():
    a = rand(150, 16)
    out = dma_skip(a, 100)  # rows 100..227 of a 150-row tensor: 50 in bounds
    ref = np.zeros((128, 16), np.float32)
    ref[:50] = a[100:]
    np.testing.assert_array_equal(out, ref)


def test_bf16_results_round_to_nearest_even():
    x = torch.randn(128, 64) * 100
    k = _unary_kernel(nl.square)
    got = k(x.to(torch.bfloat16).to("neuron")).cpu()
    # The tile keeps the input's dtype: fp32 math, one rounding to bf16.
    ref = x.to(torch.bfloat16).float().square().to(torch.bfloat16).float()
    torch.testing.assert_close(got, ref, rtol=0, atol=0)

    @nki.jit
    def to_bf16(x):
        out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        nl.store(out, value=nl.copy(nl.load(x), dtype=nl.bfloat16))
        return out

    assert torch.equal(to_bf16(x.to("neuron")).cpu(), x.to(torch.bfloat16))


@nki.jit
def printer(x):
    nl.device_print("tile:", nl.load(x))
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(x))
    return out


def test_device_print(capsys):
    printer(np.arange(4, dtype=np.float32).reshape(2, 2))
    assert "tile: [[0. 1.]\n [2. 3.]]" in capsys.readouterr().out


# Kernel plumbing ------------------------------------------------------------------
def test_traces_are_cached_per_signature():
    a = rand(128, 64)
    k = _unary_kernel(nl.exp)
    k(a)
    k(rand(128, 64))
    assert len(k._cache) == 1
    k(rand(64, 64))
    assert len(k._cache) == 2


@nki.jit
def write_into(x, out: nt.mutable_tensor):
    nl.store(out, value=nl.multiply(nl.load(x), 2.0))


def test_mutable_argument_written_in_place():
    x = rand(16, 16)
    out = np.zeros_like(x)
    assert write_into(x, out) is None
    np.testing.assert_array_equal(out, 2 * x)
    tx = torch.from_numpy(x).to("neuron")
    tout = torch.zeros(16, 16, device="neuron")
    write_into(tx, tout)
    torch.testing.assert_close(tout.cpu(), 2 * torch.from_numpy(x))


def rmsnorm_out_arg(a_tensor, g_tensor, out_tensor):
    ix = nl.arange(128)[:, None]
    iw = nl.arange(1)[:, None]
    iy = nl.arange(a_tensor.shape[1])[None, :]
    num_rows = a_tensor.shape[0]
    g_tile = nl.load(g_tensor.reshape((1, g_tensor.shape[0]))[iw, iy])
    for i in nl.affine_range((num_rows + 127) // 128):
        a_tile = nl.load(a_tensor[i * 128 + ix, iy], mask=(i * 128 + ix < num_rows))
        sq = nl.sum(nl.square(a_tile), axis=[1])
        rms = nl.rsqrt(sq / a_tensor.shape[1])
        out_tile = nl.multiply(a_tile, rms)
        g_bcast = g_tile.broadcast_to((128, g_tensor.shape[0]))
        out_tile[...] = nl.multiply(out_tile, g_bcast, mask=(i * 128 + ix < num_rows))
        nl.store(out_tensor[i * 128 + ix, iy], value=out_tile, mask=(i * 128 + ix < num_rows))


def test_output_argument_kernels_through_baremetal_and_simulate_kernel():
    a, g = rand(250, 64), rand(64)
    ref = a / np.sqrt(np.mean(a * a, axis=1, keepdims=True)) * g
    out = np.zeros_like(a)
    nki.baremetal(rmsnorm_out_arg)(a, g, out)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    out2 = np.zeros_like(a)
    nki.simulate_kernel(nki.jit(rmsnorm_out_arg), a, g, out2)
    np.testing.assert_array_equal(out, out2)


@nki.jit
def outer(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    inner(x, out)
    return out


@nki.jit
def inner(x, out):
    nl.store(out, value=nl.exp(nl.load(x)))


def test_sub_kernels_are_inlined():
    x = rand(8, 8)
    np.testing.assert_allclose(outer(x), np.exp(x), rtol=1e-6)


def test_grid_ids_and_num_programs():
    @nki.jit
    def ids(x):
        out = nl.ndarray((2, 3), dtype=nl.float32, buffer=nl.shared_hbm)
        i, j = nl.program_id(0), nl.program_id(1)
        t = nl.full((1, 1), float(i * 10 + j + 100 * nl.num_programs()), nl.float32)
        nl.store(out[i : i + 1, j : j + 1], value=t)
        return out

    out = ids[2, 3](rand(1, 1))
    np.testing.assert_array_equal(out, np.array([[600, 601, 602], [610, 611, 612]]))


def test_cpu_tensors_run_on_the_calling_thread():
    x = torch.randn(16, 16).to(torch.bfloat16)
    out = _unary_kernel(nl.exp)(x)
    assert out.device.type == "cpu"
    torch.testing.assert_close(
        out, x.float().exp().to(torch.bfloat16).float(), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.float16])
def test_narrow_float_tiles_round_like_torch(dtype):
    @nki.jit
    def narrow(x):
        out = nl.ndarray(x.shape, dtype=dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.copy(nl.load(x), dtype=dtype))
        return out

    x = torch.randn(128, 64) * 20
    got = narrow(x.to("neuron")).cpu()
    assert got.dtype == dtype
    assert torch.equal(got.float(), x.to(dtype).float())


def test_fp8_saturates_out_of_range():
    # float8_e4m3fn (torch's e4m3): max 448. The IEEE-style float8_e4m3 (max
    # 240) has no torch type: tests/test_nki_fp8_types.py checks it on NumPy.
    @nki.jit
    def to_fp8(x):
        out = nl.ndarray(x.shape, dtype=nl.float8_e4m3fn, buffer=nl.shared_hbm)
        nl.store(out, value=nl.copy(nl.load(x), dtype=nl.float8_e4m3fn))
        return out

    x = torch.tensor([[1000.0, -1000.0, 448.0, 1e-9]])
    assert to_fp8(x).float().tolist() == [[448.0, -448.0, 448.0, 0.0]]


@nki.jit
def ap_kernel(a):
    out = nl.ndarray((64, 32), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((64, 32), dtype=a.dtype, buffer=nl.sbuf)
    # Every other column of rows 1..64 of a (128, 64) tensor.
    nisa.dma_copy(dst=t, src=a.ap(pattern=[[64, 64], [2, 32]], offset=64))
    nisa.dma_copy(dst=out, src=t)
    return out


def test_access_pattern_views():
    a = rand(128, 64)
    np.testing.assert_array_equal(ap_kernel(a), a[1:65, ::2])

    @nki.jit
    def too_far(a):
        out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=a.ap(pattern=[[64, 128], [1, 64]], offset=64))
        return out

    with pytest.raises(nki.NKIError, match="reaches elements"):
        too_far(a)


# The two ISA spellings ---------------------------------------------------------------
@nki.jit
def row_stats(a, dest_first):
    """Per row: the max, minus the max, and the sum of exp(x - max); reduced
    into columns of one tile (dest_first) or as returned tiles."""
    out = nl.ndarray((128, 3), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    stats = nl.ndarray((128, 3), dtype=nl.float32)
    if dest_first:
        nisa.tensor_reduce(dst=stats[:, 0:1], op=nl.maximum, data=t, axis=1, keepdims=True)
        nisa.tensor_reduce(dst=stats[:, 1:2], op=nl.maximum, data=t, axis=1, negate=True)
        e = nl.ndarray(t.shape, dtype=nl.float32)
        nisa.activation(
            dst=e, op=nl.exp, data=t, bias=stats[:, 1:2], reduce_op=nl.add, reduce_res=stats[:, 2:3]
        )
    else:
        stats[:, 0:1] = lisa.tensor_reduce(nl.maximum, t, axis=1, keepdims=True)
        stats[:, 1:2] = lisa.tensor_reduce(nl.maximum, t, axis=1, keepdims=True, negate=True)
        lisa.activation(nl.exp, t, bias=stats[:, 1:2], reduce_op=nl.add, reduce_res=stats[:, 2:3])
    nl.store(out, value=stats)
    return out


def test_destination_first_reductions_match_the_tile_returning_form():
    # nisa.tensor_reduce(dst=...) and nisa.activation(dst=..., reduce_res=...)
    # write their destination themselves: the same results as the tile-returning
    # form, with no more instructions.
    a = rand(128, 300)
    want = np.stack([a.max(1), -a.max(1), np.exp(a - a.max(1, keepdims=True)).sum(1)], 1)
    got = {}
    for dest_first in (True, False):
        got[dest_first] = row_stats(a, dest_first)
        np.testing.assert_allclose(got[dest_first], want, rtol=1e-5)
    np.testing.assert_array_equal(got[True], got[False])
    dest_first = tnki.estimate(row_stats, nt.tensor[[128, 300], nl.float32], True)
    tile_returning = tnki.estimate(row_stats, nt.tensor[[128, 300], nl.float32], False)
    # Two reductions and the copy of the activation's row sums; the activation and its sum.
    assert dest_first.instructions["vector"] == 3 and dest_first.instructions["scalar"] == 2
    assert dest_first.num_instructions <= tile_returning.num_instructions
