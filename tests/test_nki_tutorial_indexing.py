"""Kernels written in the styles of the public NKI tutorials (aws-neuron/nki-samples,
src/nki_samples/tutorials), called the ways the tutorials call them (torch tensors on
neuron through nki.jit, NumPy through simulate_kernel), checked against NumPy/torch.

Most of them index with grids of more axes than the tensor has, e.g.
``ip, iw, jf = nl.mgrid[0:128, 0:1, 0:n]`` and ``a[ip, jf]``: the tile iterates over
the grid axes its indices are built from (``[128, n]``), not NumPy's broadcast of the
whole grid (``[128, 1, n]``)."""

import math

import neuronxcc.nki.isa as nisa  # the tile-returning ISA of the neuronxcc-era tutorials
import neuronxcc.nki.language as nl
import nki.isa as isa  # destination-first, as the newer tutorials use it
import numpy as np
import pytest
import torch
from neuronxcc import nki
from neuronxcc.nki import simulate_kernel

from torch_neuronx.nki.errors import NKIError

RNG = np.random.default_rng(11)


def _neuron(*arrays):
    return [torch.from_numpy(np.ascontiguousarray(a)).to("neuron") for a in arrays]


# Tile shapes of grid indexing ---------------------------------------------------
@nki.jit
def _tile_shapes(a, g):
    """Loads with 3-axis grids and returns each tile's shape through the output."""
    out = nl.ndarray((8, 4), dtype=nl.int32, buffer=nl.shared_hbm)
    ip, iw, jf = nl.mgrid[0:4, 0:1, 0:6]
    kp, kf, kw = nl.mgrid[0:4, 0:6, 0:1]
    shapes = [
        nl.load(a[ip, jf]).shape,  # the unused size-1 axis drops
        nl.load(g.reshape((1, 6))[iw, jf]).shape,  # the unused 4-position axis drops
        nl.load(g.reshape((1, 6))[kw, kf]).shape,  # axes follow the index positions
        nl.load(a[kp, kf]).shape,
        nl.load(a[nl.arange(4)[:, None], nl.arange(6)[None, :]]).shape,  # 2-D grids as before
        nl.load(g[nl.mgrid[0:1, 0:6][1]]).shape,  # one used axis keeps the whole grid
    ]
    for r, shape in enumerate(shapes):
        row = nl.full((1, 4), -1, dtype=nl.int32)
        for c, n in enumerate(shape):
            row[0:1, c : c + 1] = nl.full((1, 1), n, dtype=nl.int32)
        nl.store(out[r : r + 1, :], value=row)
    nl.store(out[len(shapes) :, :], value=nl.zeros((8 - len(shapes), 4), dtype=nl.int32))
    return out


def test_grid_with_more_axes_than_indices_gives_the_used_axes():
    a = RNG.random((4, 6), dtype=np.float32)
    g = RNG.random(6, dtype=np.float32)
    got = simulate_kernel(_tile_shapes, a, g)[:6]
    assert got.tolist() == [
        [4, 6, -1, -1],
        [1, 6, -1, -1],
        [1, 6, -1, -1],
        [4, 6, -1, -1],
        [4, 6, -1, -1],
        [1, 6, -1, -1],
    ]


def test_index_expressions_remember_their_grid_axes():
    ip, iw, jf = nl.mgrid[0:128, 0:1, 0:8]
    assert iw.axes == (False, True, False)
    assert (3 * ip + jf - 1).axes == (True, False, True)
    assert nl.arange(4)[:, None].axes == (True, False)
    assert (nl.arange(1)[None, :] + 2).axes == (False, True)


# RMSNorm tutorial: mgrid[0:128, 0:1, 0:n], masks over the grid ------------------
@nki.jit
def rmsnorm_like_tutorial(a_tensor, g_tensor):
    out = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    rows, cols = a_tensor.shape
    assert g_tensor.shape[0] == cols
    ip, iw, jf = nl.mgrid[0:128, 0:1, 0:cols]
    g_tile = nl.load(g_tensor.reshape((1, cols))[iw, jf])
    for t in nl.affine_range(math.ceil(rows / 128)):
        live = t * 128 + ip < rows
        x = nl.load(a_tensor[t * 128 + ip, jf], mask=live)
        inv_rms = nl.rsqrt(nl.sum(nl.square(x), axis=[1]) / cols)
        y = nl.multiply(x, inv_rms)
        y[...] = nl.multiply(y, g_tile.broadcast_to((128, cols)), mask=live)
        nl.store(out[t * 128 + ip, jf], value=y, mask=live)
    return out


def _rmsnorm_ref(a, g):
    return a / np.sqrt(np.mean(a * a, axis=1, keepdims=True)) * g


@pytest.mark.parametrize("rows", [128, 250])
def test_rmsnorm_tutorial_on_numpy_and_torch(rows):
    a = RNG.random((rows, 512), dtype=np.float32)
    g = RNG.random(512, dtype=np.float32)
    out = simulate_kernel(rmsnorm_like_tutorial, a, g)
    assert np.allclose(out, _rmsnorm_ref(a, g), atol=1e-4, rtol=1e-2)
    ta, tg = _neuron(a, g)
    t = rmsnorm_like_tutorial(ta, tg)
    assert t.device.type == "neuron"
    expected = ta.cpu() * torch.rsqrt(ta.cpu().pow(2).mean(dim=1, keepdim=True)) * tg.cpu()
    assert torch.allclose(t.cpu(), expected, atol=1e-5, rtol=1e-3)


# LayerNorm tutorial v1: the size-1 grid axis last, used as the partition index ---
@nki.jit
def layernorm_like_tutorial(x_tensor, epsilon, gamma, beta):
    out = nl.ndarray(x_tensor.shape, dtype=x_tensor.dtype, buffer=nl.shared_hbm)
    rows, cols = x_tensor.shape
    ip, jf, kq = nl.mgrid[0 : nl.tile_size.pmax, 0:cols, 0:1]
    gamma_row = nl.load(gamma.reshape((1, cols))[kq, jf])
    beta_row = nl.load(beta.reshape((1, cols))[kq, jf])
    gamma_all = gamma_row.broadcast_to((nl.tile_size.pmax, cols))
    beta_all = beta_row.broadcast_to((nl.tile_size.pmax, cols))
    for t in nl.affine_range(math.ceil(rows / nl.tile_size.pmax)):
        live = t * nl.tile_size.pmax + ip < rows
        x = nl.load(x_tensor[t * nl.tile_size.pmax + ip, jf], mask=live)
        mean = nl.mean(x, axis=1)
        var = nl.mean(nl.square(x), axis=1) - mean * mean
        y = (x - mean) * nl.rsqrt(var + epsilon) * gamma_all + beta_all
        nl.store(out[t * nl.tile_size.pmax + ip, jf], value=y, mask=live)
    return out


def test_layernorm_tutorial_v1_on_numpy_and_torch():
    x = RNG.random((200, 256), dtype=np.float32)
    gamma = RNG.random(256, dtype=np.float32)
    beta = RNG.random(256, dtype=np.float32)
    mu = x.mean(axis=1, keepdims=True)
    ref = (x - mu) / np.sqrt(x.var(axis=1, keepdims=True) + 1e-5) * gamma + beta
    assert np.allclose(
        simulate_kernel(layernorm_like_tutorial, x, 1e-5, gamma, beta), ref, atol=1e-4, rtol=1e-3
    )
    t = layernorm_like_tutorial(*_neuron(x), 1e-5, *_neuron(gamma, beta))
    assert np.allclose(t.cpu().numpy(), ref, atol=1e-4, rtol=1e-3)


# Transpose2d tutorial: an [F1, F2] matrix per partition, transposed by indices ----
@nki.jit
def transpose_free_axes(in_tensor, shape2d):
    out = nl.ndarray(in_tensor.shape, dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    parts = in_tensor.shape[0]
    f1, f2 = shape2d
    src = nl.load(in_tensor)
    ip, i1, i2 = nl.mgrid[0:parts, 0:f1, 0:f2]
    dst = nl.ndarray((parts, f1 * f2), dtype=in_tensor.dtype)
    dst[ip, i2 * f1 + i1] = nl.copy(src[ip, i1 * f2 + i2])
    nl.store(out, value=dst)
    return out


def test_transpose2d_tutorial():
    a = np.arange(5 * 12, dtype=np.int8).reshape(5, 12)
    got = simulate_kernel(transpose_free_axes, a, (3, 4))
    assert np.array_equal(got, a.reshape(5, 3, 4).transpose(0, 2, 1).reshape(5, 12))


# Max pooling (programming guide case 3): a 5-axis grid over a 3-D tile -----------
@nki.jit
def maxpool_by_indices(in_tensor, pool):
    c, h, w = in_tensor.shape
    out = nl.ndarray((c, h // pool, w // pool), dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    i_c = nl.arange(c)[:, None, None]
    tile = nl.ndarray((c, h, w), dtype=in_tensor.dtype)
    tile[:, :, :] = nl.load(
        in_tensor[i_c, nl.arange(h)[None, :, None], nl.arange(w)[None, None, :]]
    )
    g0 = nl.arange(c)[:, None, None, None, None]
    g1 = nl.arange(h // pool)[None, :, None, None, None]
    g2 = nl.arange(pool)[None, None, :, None, None]
    g3 = nl.arange(w // pool)[None, None, None, :, None]
    g4 = nl.arange(pool)[None, None, None, None, :]
    pooled = nl.max(tile[g0, pool * g1 + g2, pool * g3 + g4], axis=[2, 4])
    nl.store(
        out[i_c, nl.arange(h // pool)[None, :, None], nl.arange(w // pool)[None, None, :]],
        value=pooled,
    )
    return out


# Average pooling (the newer tutorial): a 5-D .ap() view, dst-first ISA calls ------
@nki.jit
def avgpool_by_access_pattern(in_tensor, pool):
    c, h, w = in_tensor.shape
    out = nl.ndarray((c, h // pool, w // pool), dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    tile = nl.ndarray(in_tensor.shape, dtype=in_tensor.dtype, buffer=nl.sbuf)
    isa.dma_copy(dst=tile, src=in_tensor)
    windows = tile.ap([[h * w, c], [pool * w, h // pool], [pool, w // pool], [w, pool], [1, pool]])
    sums = nl.sum(windows, axis=[3, 4])
    avg = nl.ndarray(sums.shape, dtype=sums.dtype, buffer=nl.sbuf)
    isa.tensor_scalar(dst=avg, data=sums, op0=nl.multiply, operand0=1.0 / (pool * pool))
    isa.dma_copy(dst=out, src=avg)
    return out


def test_pooling_tutorials_on_numpy_and_torch():
    x = np.arange(2 * 6 * 8, dtype=np.float32).reshape(2, 6, 8)
    windows = x.reshape(2, 3, 2, 4, 2)
    assert np.array_equal(simulate_kernel(maxpool_by_indices, x, 2), windows.max(axis=(2, 4)))
    avg = avgpool_by_access_pattern(*_neuron(x), 2)
    assert np.allclose(avg.cpu().numpy(), windows.mean(axis=(2, 4)))


# Softmax tutorial: masked reductions with keepdims on a 2-D grid -------------------
@nki.jit
def softmax_rows(a_tensor):
    out = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0 : a_tensor.shape[1]]
    rows = a_tensor.shape[0]
    for t in nl.affine_range(math.ceil(rows / 128)):
        live = t * 128 + ip < rows
        x = nl.load(a_tensor[t * 128 + ip, jf], mask=live)
        top = nl.max(x, axis=[1], keepdims=True, mask=live)
        e = nl.exp(nl.subtract(x, top, mask=live))
        nl.store(out[t * 128 + ip, jf], value=e / nl.sum(e, axis=[1]), mask=live)
    return out


def test_softmax_tutorial_on_torch():
    x = torch.randn(300, 64)
    assert torch.allclose(softmax_rows(x.to("neuron")).cpu(), torch.softmax(x, 1), atol=1e-6)


# Fused Mamba tutorial v1/v2: block dims, activation scale, scans, PSUM += ----------
# (v3 carries the scan across chunks with a tile `initial`, which the simulator refuses.)
@nki.jit
def mamba_scan(delta, u, a_mat, b_mat, c_mat, chunk):
    batch, channels, seq = delta.shape
    states = a_mat.shape[1]
    out = nl.ndarray((batch, channels, seq), dtype=delta.dtype, buffer=nl.shared_hbm)
    p = nl.tile_size.pmax
    for ib in nl.affine_range(batch):
        for ic in nl.affine_range(channels // p):
            c0 = ic * p
            acc = nl.zeros((nl.par_dim(p), seq), dtype=delta.dtype)
            d_i = nl.load(delta[ib, c0 : c0 + p, 0:seq])
            u_i = nl.load(u[ib, c0 : c0 + p, 0:seq])
            for s in nl.affine_range(states):
                a_i = nl.load(a_mat[c0 : c0 + p, s])
                for k in nl.static_range(seq // chunk):
                    f0 = k * chunk
                    da = nisa.activation(op=nl.exp, data=d_i[0:p, f0 : f0 + chunk], scale=a_i)
                    b_i = nl.load(b_mat[ib, s : s + 1, f0 : f0 + chunk])
                    du = nisa.tensor_tensor(
                        d_i[0:p, f0 : f0 + chunk], u_i[0:p, f0 : f0 + chunk], op=nl.multiply
                    )
                    dbu = nisa.tensor_tensor(du, b_i.broadcast_to((p, chunk)), op=nl.multiply)
                    h = nisa.tensor_tensor_scan(da, dbu, initial=0, op0=np.multiply, op1=np.add)
                    c_i = nl.load(c_mat[ib, s : s + 1, f0 : f0 + chunk])
                    y = nl.ndarray((p, chunk), dtype=delta.dtype, buffer=nl.psum)
                    y[...] = nisa.tensor_tensor(h, c_i.broadcast_to((p, chunk)), op=nl.multiply)
                    acc[0:p, f0 : f0 + chunk] += y
            nl.store(out[ib, c0 : c0 + p, 0:seq], acc[0:p, 0:seq])
    return out


def _mamba_ref(delta, u, a_mat, b_mat, c_mat):
    da = torch.exp(delta[:, :, None, :] * a_mat[None, :, :, None])
    dbu = delta[:, :, None, :] * u[:, :, None, :] * b_mat[:, None, :, :]
    h = torch.zeros_like(da[..., 0])
    ys = []
    for t in range(delta.shape[-1]):
        h = da[..., t] * h + dbu[..., t]
        ys.append((h * c_mat[:, None, :, t]).sum(-1))
    return torch.stack(ys, dim=-1)


def test_fused_mamba_tutorial_on_torch():
    batch, channels, seq, states = 1, 256, 64, 4
    delta = torch.rand(batch, channels, seq) * 0.1
    u = torch.randn(batch, channels, seq)
    a_mat = -torch.rand(channels, states)
    b_mat = torch.randn(batch, states, seq)
    c_mat = torch.randn(batch, states, seq)
    args = [t.to("neuron") for t in (delta, u, a_mat, b_mat, c_mat)]
    out = mamba_scan(*args, seq)
    assert torch.allclose(out.cpu(), _mamba_ref(delta, u, a_mat, b_mat, c_mat), atol=1e-4)


@nki.jit
def _scan_from_a_tile(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    carry = nl.zeros((x.shape[0], 1), dtype=x.dtype)
    nl.store(out, nisa.tensor_tensor_scan(t, t, initial=carry, op0=np.multiply, op1=np.add))
    return out


def test_scan_with_a_zero_tile_initial_matches_a_scalar_zero():
    x = np.random.default_rng(0).random((128, 8), dtype=np.float32)
    expected = np.zeros_like(x)
    prev = np.zeros(128, np.float32)
    for j in range(8):
        prev = x[:, j] * prev + x[:, j]
        expected[:, j] = prev
    np.testing.assert_array_equal(simulate_kernel(_scan_from_a_tile, x), expected)


# Matrix multiplication tutorial (destination-first nki API) -----------------------
@nki.jit
def matmul_blocked_dst_first(lhs_t, rhs):
    k_dim, m_dim = lhs_t.shape
    n_dim = rhs.shape[1]
    tm, tk, tn = 128, 128, 512
    result = nl.ndarray((m_dim, n_dim), dtype=lhs_t.dtype, buffer=nl.shared_hbm)
    for n in nl.affine_range(n_dim // tn):
        acc_tiles = []
        for _ in range(m_dim // tm):
            acc = nl.ndarray((tm, tn), dtype=nl.float32, buffer=nl.sbuf)
            isa.memset(dst=acc, value=0)
            acc_tiles.append(acc)
        for k in nl.sequential_range(k_dim // tk):
            rhs_tile = nl.ndarray((tk, tn), dtype=rhs.dtype, buffer=nl.sbuf)
            isa.dma_copy(dst=rhs_tile, src=rhs[k * tk : (k + 1) * tk, n * tn : (n + 1) * tn])
            for m in nl.affine_range(m_dim // tm):
                lhs_tile = nl.ndarray((tk, tm), dtype=lhs_t.dtype, buffer=nl.sbuf)
                isa.dma_copy(dst=lhs_tile, src=lhs_t[k * tk : (k + 1) * tk, m * tm : (m + 1) * tm])
                part = nl.ndarray((tm, tn), dtype=nl.float32, buffer=nl.psum)
                isa.nc_matmul(dst=part, stationary=lhs_tile, moving=rhs_tile)
                isa.tensor_tensor(dst=acc_tiles[m], data1=acc_tiles[m], data2=part, op=nl.add)
        for m in nl.affine_range(m_dim // tm):
            res = nl.ndarray((tm, tn), dtype=result.dtype, buffer=nl.sbuf)
            isa.tensor_copy(dst=res, src=acc_tiles[m])
            isa.dma_copy(dst=result[m * tm : (m + 1) * tm, n * tn : (n + 1) * tn], src=res)
    return result


def test_matmul_tutorial_dst_first_on_torch():
    lhs = torch.randn(256, 256, dtype=torch.bfloat16)
    rhs = torch.randn(256, 1024, dtype=torch.bfloat16)
    out = matmul_blocked_dst_first(lhs.T.contiguous().to("neuron"), rhs.to("neuron"))
    assert torch.allclose(out.cpu().float(), lhs.float() @ rhs.float(), atol=1e-1, rtol=2e-2)


# Attention forward tutorial v1/v2: nl.matmul, nl.transpose, ISA softmax ---------
@nki.jit
def attention_small(q, k, v):
    d_head, seq = q.shape
    out = nl.ndarray((seq, d_head), dtype=q.dtype, buffer=nl.shared_hbm)
    q_sb, k_sb, v_sb = nl.load(q), nl.load(k), nl.load(v)
    scores_psum = nl.matmul(x=q_sb, y=k_sb, transpose_x=True)
    scores = nl.ndarray(scores_psum.shape, dtype=nl.float32, buffer=nl.sbuf)
    isa.tensor_copy(dst=scores, src=scores_psum)
    top = nl.ndarray((seq, 1), dtype=nl.float32, buffer=nl.sbuf)
    isa.tensor_reduce(dst=top, op=nl.maximum, data=scores, axis=(1,))
    shifted = nl.ndarray(scores.shape, dtype=nl.float32, buffer=nl.sbuf)
    isa.tensor_scalar(dst=shifted, data=scores, op0=nl.subtract, operand0=top)
    e = nl.ndarray(scores.shape, dtype=nl.float32, buffer=nl.sbuf)
    isa.activation(dst=e, op=nl.exp, data=shifted)
    total = nl.ndarray((seq, 1), dtype=nl.float32, buffer=nl.sbuf)
    isa.tensor_reduce(dst=total, op=nl.add, data=e, axis=(1,))
    inv = nl.ndarray((seq, 1), dtype=nl.float32, buffer=nl.sbuf)
    isa.reciprocal(dst=inv, data=total)
    probs = nl.ndarray(scores.shape, dtype=nl.float32, buffer=nl.sbuf)
    isa.tensor_scalar(dst=probs, data=e, op0=nl.multiply, operand0=inv)
    probs_t_psum = nl.ndarray((seq, seq), dtype=nl.float32, buffer=nl.psum)
    isa.nc_transpose(dst=probs_t_psum, data=probs)
    probs_t = nl.ndarray((seq, seq), dtype=nl.float32, buffer=nl.sbuf)
    isa.tensor_copy(dst=probs_t, src=probs_t_psum)
    v_t_psum = nl.transpose(v_sb)
    v_t = nl.ndarray(v_t_psum.shape, dtype=nl.float32, buffer=nl.sbuf)
    isa.tensor_copy(dst=v_t, src=v_t_psum)
    res_psum = nl.ndarray((seq, d_head), dtype=nl.float32, buffer=nl.psum)
    isa.nc_matmul(dst=res_psum, stationary=probs_t, moving=v_t)
    res = nl.ndarray((seq, d_head), dtype=nl.float32, buffer=nl.sbuf)
    isa.tensor_copy(dst=res, src=res_psum)
    isa.dma_copy(dst=out, src=res)
    return out


def test_attention_fwd_tutorial_small_on_torch():
    q, k, v = (torch.randn(128, 128) for _ in range(3))
    out = attention_small(*(t.to("neuron") for t in (q, k, v)))
    ref = torch.softmax(q.T @ k, dim=1) @ v.T
    assert torch.allclose(out.cpu(), ref, atol=1e-4, rtol=1e-3)


# SPMD tensor addition tutorial: mgrid plus program ids -----------------------------
@nki.jit
def spmd_add(a, b):
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:512]
    ix = nl.program_id(0) * 128 + ip
    iy = nl.program_id(1) * 512 + jf
    nl.store(c[ix, iy], value=nl.load(a[ix, iy]) + nl.load(b[ix, iy]))
    return c


def test_spmd_tensor_addition_tutorial_on_numpy_and_torch():
    a = RNG.random((256, 1024), dtype=np.float32).astype(np.float16)
    b = RNG.random((256, 1024), dtype=np.float32).astype(np.float16)
    assert np.allclose(simulate_kernel(spmd_add[2, 2], a, b), a + b, atol=1e-4, rtol=1e-2)
    ta, tb = _neuron(a, b)
    assert torch.equal(spmd_add[2, 2](ta, tb).cpu(), ta.cpu() + tb.cpu())


# Bad input ----------------------------------------------------------------------
@nki.jit
def _mask_from_another_grid(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:64]
    kp, kf, kg = nl.mgrid[0:128, 0:3, 0:5]
    x = nl.load(a[ip, jf])
    nl.store(out[ip, jf], value=x, mask=(kf + kg < 4))
    return out


def test_a_mask_that_cannot_fit_the_tile_is_an_error():
    with pytest.raises(NKIError, match=r"mask of shape \[128, 3, 5\] does not match the tile"):
        simulate_kernel(_mask_from_another_grid, np.zeros((128, 64), np.float32))
