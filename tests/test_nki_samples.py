"""Kernels in the style of the public NKI tutorials and samples, called the
ways their own tests call them (NumPy through simulate_kernel / baremetal,
output arguments, ufunc ops, par_dim tiles), checked against NumPy."""

import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
import torch
from neuronxcc import nki
from neuronxcc.nki import baremetal, simulate_kernel
from neuronxcc.nki.language import par_dim

RNG = np.random.default_rng(7)


# Tensor add, the oldest style: output argument, SPMD grid, baremetal -------------
def nki_tensor_add_kernel_(a_input, b_input, c_output):
    offset_i_x = nl.program_id(0) * 128
    offset_i_y = nl.program_id(1) * 512
    ix = offset_i_x + nl.arange(128)[:, None]
    iy = offset_i_y + nl.arange(512)[None, :]
    a_tile = nl.load(a_input[ix, iy])
    b_tile = nl.load(b_input[ix, iy])
    c_tile = nl.add(a_tile, b_tile)
    nl.store(c_output[ix, iy], value=c_tile)


def test_tensor_add_output_argument_baremetal():
    a = RNG.random((256, 1024), dtype=np.float32).astype(np.float16)
    b = RNG.random((256, 1024), dtype=np.float32).astype(np.float16)
    c = np.zeros_like(a)
    baremetal(nki_tensor_add_kernel_)[2, 2](a, b, c)
    assert np.allclose(c, a + b, atol=1e-4, rtol=1e-2)


# Matmul, basic: mgrid indices, nl.matmul(transpose_x), nl.copy out of PSUM -------
@nki.jit
def nki_matmul_basic_(lhsT, rhs):
    result = nl.ndarray((64, 512), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    i_lhsT_p, i_lhsT_f = nl.mgrid[0:128, 0:64]
    i_rhs_p, i_rhs_f = nl.mgrid[0:128, 0:512]
    i_out_p, i_out_f = nl.mgrid[0:64, 0:512]
    lhs_tile = nl.load(lhsT[i_lhsT_p, i_lhsT_f])
    rhs_tile = nl.load(rhs[i_rhs_p, i_rhs_f])
    result_psum = nl.matmul(lhs_tile, rhs_tile, transpose_x=True)
    result_sbuf = nl.copy(result_psum, dtype=result.dtype)
    nl.store(result[i_out_p, i_out_f], value=result_sbuf)
    return result


def test_matmul_basic_on_numpy_and_torch():
    lhs = RNG.standard_normal((64, 128)).astype(np.float32)
    rhs = RNG.standard_normal((128, 512)).astype(np.float32)
    out = simulate_kernel(nki_matmul_basic_, lhs.T.copy(), rhs)
    assert np.allclose(out, lhs @ rhs, atol=1e-4, rtol=1e-2)
    t = nki_matmul_basic_(torch.from_numpy(lhs).T.to("neuron"), torch.from_numpy(rhs).to("neuron"))
    assert torch.allclose(t.cpu(), torch.from_numpy(lhs @ rhs), atol=1e-4, rtol=1e-2)


# Matmul with hoisted loads into par_dim block tiles and mgrid .p/.x ---------------
@nki.jit
def nki_matmul_hoist_load_(lhsT, rhs):
    K, M = lhsT.shape
    K_, N = rhs.shape
    TILE_M = nl.tile_size.gemm_stationary_fmax
    TILE_K = nl.tile_size.pmax
    TILE_N = nl.tile_size.gemm_moving_fmax
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    i_lhsT = nl.mgrid[0:TILE_K, 0:TILE_M]
    i_rhs = nl.mgrid[0:TILE_K, 0:TILE_N]
    i_res = nl.mgrid[0:TILE_M, 0:TILE_N]
    for m in nl.affine_range(M // TILE_M):
        lhsT_tiles = nl.ndarray(
            (K // TILE_K, nl.par_dim(TILE_K), TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf
        )
        for k in nl.affine_range(K // TILE_K):
            lhsT_tiles[k, i_lhsT.p, i_lhsT.x] = nl.load(
                lhsT[k * TILE_K + i_lhsT.p, m * TILE_M + i_lhsT.x]
            )
        for n in nl.affine_range(N // TILE_N):
            rhs_tiles = nl.ndarray(
                (K // TILE_K, nl.par_dim(TILE_K), TILE_N), dtype=rhs.dtype, buffer=nl.sbuf
            )
            for k in nl.affine_range(K // TILE_K):
                rhs_tiles[k, i_rhs.p, i_rhs.x] = nl.load(
                    rhs[k * TILE_K + i_rhs.p, n * TILE_N + i_rhs.x]
                )
            res_psum = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                res_psum[...] += nl.matmul(
                    lhsT_tiles[k, i_lhsT.p, i_lhsT.x],
                    rhs_tiles[k, i_rhs.p, i_rhs.x],
                    transpose_x=True,
                )
            res_sb = nl.copy(res_psum, dtype=result.dtype)
            nl.store(result[m * TILE_M + i_res.p, n * TILE_N + i_res.x], value=res_sb)
    return result


def test_matmul_hoisted_loads_bf16_torch():
    a = torch.randn(512, 256, dtype=torch.bfloat16)
    b = torch.randn(512, 1024, dtype=torch.bfloat16)
    out = nki_matmul_hoist_load_(a.to("neuron"), b.to("neuron")).cpu()
    ref = (a.float().T @ b.float()).to(torch.bfloat16)
    torch.testing.assert_close(out.float(), ref.float(), atol=1e-1, rtol=2e-2)


# LayerNorm v2: bn_stats/bn_aggr, tensor_scalar with numpy ufuncs, output arg ----
def nki_layernorm_kernel_v2(input_tensor, epsilon, gamma_vector, beta_vector, output_tensor):
    num_rows, F = input_tensor.shape
    i_p_io = nl.arange(nl.tile_size.pmax)[:, None]
    i_f_io = nl.arange(F)[None, :]
    i_p_param = nl.arange(1)[:, None]
    gamma_sb = nl.load(gamma_vector.reshape((1, F))[i_p_param, i_f_io])
    beta_sb = nl.load(beta_vector.reshape((1, F))[i_p_param, i_f_io])
    gamma_bcast = gamma_sb.broadcast_to((nl.tile_size.pmax, F))
    beta_bcast = beta_sb.broadcast_to((nl.tile_size.pmax, F))
    bn_fmax = nl.tile_size.bn_stats_fmax
    num_bn_stats = (F + bn_fmax - 1) // bn_fmax
    i_f_bn = nl.arange(bn_fmax)[None, :]
    i_f_stats = nl.arange(6)[None, :]
    i_f_aggr = nl.arange(6 * num_bn_stats)[None, :]
    for i in nl.affine_range((num_rows + nl.tile_size.pmax - 1) // nl.tile_size.pmax):
        rows = i * nl.tile_size.pmax + i_p_io < num_rows
        input_sb = nl.load(input_tensor[i * nl.tile_size.pmax + i_p_io, i_f_io], mask=rows)
        stats_results = nl.ndarray((nl.tile_size.pmax, 6 * num_bn_stats), dtype=np.float32)
        for j in nl.affine_range(num_bn_stats):
            stats_results[i_p_io, j * 6 + i_f_stats] = nisa.bn_stats(
                input_sb[i_p_io, j * bn_fmax + i_f_bn],
                mask=(j * bn_fmax + i_f_bn < F),
                dtype=np.float32,
            )
        mean_var = nisa.bn_aggr(stats_results[i_p_io, i_f_aggr])
        mean = mean_var[i_p_io, 0]
        var = mean_var[i_p_io, 1]
        scale_var = nl.rsqrt(var + epsilon)
        shifted = nisa.tensor_scalar(
            data=input_sb, op0=np.subtract, operand0=mean, op1=np.multiply, operand1=scale_var
        )
        output_sb = shifted * gamma_bcast + beta_bcast
        nl.store(output_tensor[i * nl.tile_size.pmax + i_p_io, i_f_io], value=output_sb, mask=rows)


def test_layernorm_v2_bn_stats_masks_and_ufuncs():
    x = RNG.standard_normal((300, 1000)).astype(np.float32)
    g = RNG.standard_normal(1000).astype(np.float32)
    b = RNG.standard_normal(1000).astype(np.float32)
    out = np.zeros_like(x)
    baremetal(nki_layernorm_kernel_v2)(x, 1e-5, g, b, out)
    ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * g + b
    assert np.allclose(out, ref, atol=1e-4, rtol=1e-3)


# Fused self-attention for small head sizes (Stable Diffusion style) -------------
@nki.jit
def fused_self_attn_small_head(q_ref, k_ref, v_ref, use_causal_mask=False):
    """q, k, v (seqlen, d_head), seqlen a multiple of 128, d_head <= 128:
    softmax(q k^T * 0.125) v with the scores of a whole row in SBUF."""
    kernel_dtype = q_ref.dtype
    pe_in_dt = nl.bfloat16 if kernel_dtype == nl.bfloat16 else np.float32
    seqlen, d_head = q_ref.shape
    softmax_scale = 0.125
    out_ref = nl.ndarray((seqlen, d_head), dtype=q_ref.dtype, buffer=nl.shared_hbm)
    q_seq_n_tiles, k_seq_n_tiles = seqlen // 128, seqlen // 128

    # v: rows of 128 keys.
    trans_v = nl.ndarray((par_dim(128), k_seq_n_tiles, d_head), dtype=pe_in_dt)
    ip_v = nl.arange(128)[:, None]
    if_v = nl.arange(d_head)[None, :]
    for i_k_seq_tile in nl.affine_range(k_seq_n_tiles):
        trans_v[ip_v, i_k_seq_tile, if_v] = nl.load(
            v_ref[i_k_seq_tile * 128 + ip_v, if_v], dtype=pe_in_dt
        )
    # q^T and k^T: head dim on the partitions.
    q_local = nl.ndarray((q_seq_n_tiles, par_dim(d_head), 128), dtype=pe_in_dt)
    ip_q = nl.arange(d_head)[:, None]
    if_q = nl.arange(128)[None, :]
    for i_q_seq_tile in nl.affine_range(q_seq_n_tiles):
        q_local[i_q_seq_tile, ip_q, if_q] = (
            nl.load_transpose2d(
                q_ref[i_q_seq_tile * 128 + nl.arange(128)[:, None], nl.arange(d_head)[None, :]],
                dtype=pe_in_dt,
            )
            * softmax_scale
        )
    k_local = nl.ndarray((k_seq_n_tiles, par_dim(d_head), 128), dtype=pe_in_dt)
    for i_k_seq_tile in nl.affine_range(k_seq_n_tiles):
        k_local[i_k_seq_tile, ip_q, if_q] = nl.load_transpose2d(
            k_ref[i_k_seq_tile * 128 + nl.arange(128)[:, None], nl.arange(d_head)[None, :]],
            dtype=pe_in_dt,
        )

    for i_q_seq_tile in nl.affine_range(q_seq_n_tiles):
        qk_res_buf = nl.ndarray((par_dim(128), seqlen), dtype=kernel_dtype)
        neg_max_res = nl.ndarray((par_dim(128), k_seq_n_tiles), dtype=kernel_dtype)
        ip_qk = nl.arange(128)[:, None]
        if_qk = nl.arange(128)[None, :]
        ip_max = nl.arange(128)[:, None]
        if_max = nl.arange(k_seq_n_tiles)[None, :]
        for i_k_seq_tile in nl.affine_range(k_seq_n_tiles):
            qk_psum = nl.zeros((par_dim(128), 128), dtype=np.float32, buffer=nl.psum)
            qk_psum[ip_qk, if_qk] += nisa.nc_matmul(
                moving=k_local[i_k_seq_tile, ip_q, if_q],
                stationary=q_local[i_q_seq_tile, ip_q, if_q],
            )
            if use_causal_mask:
                qk_res_buf[ip_qk, i_k_seq_tile * 128 + if_qk] = nisa.affine_select(
                    pred=(i_q_seq_tile * 128 + ip_qk >= i_k_seq_tile * 128 + if_qk),
                    on_true_tile=qk_psum[ip_qk, if_qk],
                    on_false_value=-9984.0,
                    dtype=kernel_dtype,
                )
            else:
                qk_res_buf[ip_qk, i_k_seq_tile * 128 + if_qk] = nl.copy(
                    qk_psum[ip_qk, if_qk], dtype=kernel_dtype
                )
            neg_max_res[ip_max, i_k_seq_tile] = nisa.tensor_reduce(
                np.max,
                data=qk_res_buf[ip_qk, i_k_seq_tile * 128 + if_qk],
                axis=(1,),
                dtype=kernel_dtype,
                negate=True,
            )
        neg_max_res_final = nisa.tensor_reduce(
            np.min, data=neg_max_res[ip_max, if_max], axis=(1,), dtype=kernel_dtype, negate=False
        )
        ip_softmax = nl.arange(128)[:, None]
        if_softmax = nl.arange(seqlen)[None, :]
        exp_res = nisa.activation(
            np.exp, data=qk_res_buf[ip_softmax, if_softmax], bias=neg_max_res_final, scale=1.0
        )
        sum_res = nisa.tensor_reduce(np.add, data=exp_res, axis=(1,), dtype=kernel_dtype)
        softmax_res = nl.copy(exp_res, dtype=pe_in_dt)
        sum_reciprocal = 1.0 / sum_res
        sum_reciprocal_broadcast = sum_reciprocal.broadcast_to((128, d_head))

        trans_softmax_res = nl.ndarray((par_dim(128), k_seq_n_tiles, 128), dtype=pe_in_dt)
        ip_scores = nl.arange(128)[:, None]
        if_scores = nl.arange(128)[None, :]
        for i_k_seq_tile in nl.affine_range(k_seq_n_tiles):
            trans_softmax_res[ip_scores, i_k_seq_tile, if_scores] = nisa.nc_transpose(
                softmax_res[ip_scores, i_k_seq_tile * 128 + if_scores]
            )

        attn_res_psum = nl.zeros((par_dim(128), 128), np.float32, buffer=nl.psum)
        ip_out = nl.arange(128)[:, None]
        if_out = nl.arange(d_head)[None, :]
        for i_k_seq_tile in nl.affine_range(k_seq_n_tiles):
            attn_res_psum[ip_out, if_out] += nisa.nc_matmul(
                moving=trans_v[ip_v, i_k_seq_tile, if_v],
                stationary=trans_softmax_res[ip_scores, i_k_seq_tile, if_scores],
            )
        attn_res_sbuf = nl.copy(attn_res_psum[ip_out, if_out], dtype=kernel_dtype)
        attn_res_div = attn_res_sbuf * sum_reciprocal_broadcast
        nl.store(out_ref[i_q_seq_tile * 128 + ip_out, if_out], value=attn_res_div)
    return out_ref


def _attention_ref(q, k, v, causal):
    s = (q @ k.T) * 0.125
    if causal:
        s = np.where(np.tril(np.ones(s.shape, bool)), s, -9984.0)
    p = np.exp(s - s.max(1, keepdims=True))
    return (p / p.sum(1, keepdims=True)) @ v


def test_fused_self_attention_sample():
    for causal in (False, True):
        q, k, v = (RNG.standard_normal((512, 64)).astype(np.float32) for _ in range(3))
        out = simulate_kernel(fused_self_attn_small_head, q, k, v, use_causal_mask=causal)
        assert np.allclose(out, _attention_ref(q, k, v, causal), atol=1e-5, rtol=1e-3)
    est = fused_self_attn_small_head.last_profile
    assert est.total_us > 0 and est.busy_us["tensor"] > 0 and est.busy_us["scalar"] > 0
