"""The remaining NKI tutorial constructs (aws-neuron/nki-samples
src/nki_samples/tutorials), in kernels of our own written the tutorials' way:

- fused_mamba v3: ``tensor_tensor_scan(..., initial=<[P, 1] tile>)`` carrying the
  scan from one sequence chunk to the next, results accumulated through PSUM;
  checked against NumPy and, as the tutorial does, bitwise against the
  unchunked scan;
- tensor_indirection: ``data_tile.indirect(idx_tile, num_elem=n)`` as the source of
  ``nisa.tensor_copy`` (offsets read at run time, 16-partition groups), on torch
  CPU and neuron tensors, with out-of-range offsets reported at the kernel line.
"""

from __future__ import annotations

import neuronxcc.nki.isa as lisa
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch

from torch_neuronx.nki import NKIError, simulate_kernel


# fused_mamba: the selective scan, sequence in chunks -------------------------------
def _ssm_reference(delta, u, a_mat, b_mat, c_mat):
    """out[b, c, t] = sum_s C[b, s, t] * h_s[t], with
    h_s[t] = exp(delta[b, c, t] * A[c, s]) * h_s[t - 1] + delta * u * B[b, s, t]."""
    batch, channels, seq = delta.shape
    out = np.zeros((batch, channels, seq), np.float64)
    for s in range(a_mat.shape[1]):
        decay = np.exp(delta * a_mat[None, :, s, None])
        drive = delta * u * b_mat[:, None, s, :]
        h = np.zeros((batch, channels), np.float64)
        for t in range(seq):
            h = decay[:, :, t] * h + drive[:, :, t]
            out[:, :, t] += c_mat[:, None, s, t] * h
    return out


def _ssm_kernel(chunk: int | None):
    """The SSM over 128-channel tiles; `chunk`: scan the sequence in chunks of
    this many steps, each starting from the last state of the one before
    (None: one scan over the whole sequence from 0)."""

    @nki.jit
    def ssm(delta, u, a_mat, b_mat, c_mat):
        batch, channels, seq = delta.shape
        states = a_mat.shape[1]
        result = nl.ndarray((batch, channels, seq), dtype=delta.dtype, buffer=nl.shared_hbm)
        parts = nl.tile_size.pmax
        step = seq if chunk is None else chunk
        for bi in nl.affine_range(batch):
            for ct in nl.affine_range(channels // parts):
                rows = slice(ct * parts, (ct + 1) * parts)
                total = nl.zeros((parts, seq), dtype=delta.dtype)
                d_tile = nl.load(delta[bi, rows, 0:seq])
                u_tile = nl.load(u[bi, rows, 0:seq])
                for si in nl.affine_range(states):
                    a_col = nl.load(a_mat[rows, si])
                    state = nl.zeros((parts, 1), dtype=delta.dtype)
                    for k in nl.static_range(seq // step):
                        cols = slice(k * step, (k + 1) * step)
                        decay = lisa.activation(op=nl.exp, data=d_tile[0:parts, cols], scale=a_col)
                        b_row = nl.load(b_mat[bi, si : si + 1, cols])
                        du = lisa.tensor_tensor(
                            d_tile[0:parts, cols], u_tile[0:parts, cols], op=nl.multiply
                        )
                        drive = lisa.tensor_tensor(
                            du, b_row.broadcast_to((parts, step)), op=nl.multiply
                        )
                        if chunk is None:
                            h = lisa.tensor_tensor_scan(
                                decay, drive, initial=0, op0=np.multiply, op1=np.add
                            )
                        else:
                            h = lisa.tensor_tensor_scan(
                                decay, drive, initial=state, op0=np.multiply, op1=np.add
                            )
                            state[...] = h[0:parts, step - 1]
                        c_row = nl.load(c_mat[bi, si : si + 1, cols])
                        weighted = nl.ndarray((parts, step), dtype=delta.dtype, buffer=nl.psum)
                        weighted[...] = lisa.tensor_tensor(
                            h, c_row.broadcast_to((parts, step)), op=nl.multiply
                        )
                        total[0:parts, cols] += weighted
                nl.store(result[bi, rows, 0:seq], total[0:parts, 0:seq])
        return result

    return ssm


def _ssm_inputs(batch=1, channels=256, seq=96, states=3, seed=0):
    rng = np.random.default_rng(seed)
    delta = (rng.random((batch, channels, seq)) * 0.2).astype(np.float32)
    u = rng.standard_normal((batch, channels, seq)).astype(np.float32)
    a_mat = -rng.random((channels, states)).astype(np.float32)
    b_mat = rng.standard_normal((batch, states, seq)).astype(np.float32)
    c_mat = rng.standard_normal((batch, states, seq)).astype(np.float32)
    return delta, u, a_mat, b_mat, c_mat


def test_chunked_scan_carries_its_state_in_a_tile_initial():
    args = _ssm_inputs()
    chunked = simulate_kernel(_ssm_kernel(32), *args)
    np.testing.assert_allclose(chunked, _ssm_reference(*args), rtol=1e-4, atol=1e-4)
    # As the tutorial checks its v3 against v1: the same values, bit for bit.
    whole = simulate_kernel(_ssm_kernel(None), *args)
    np.testing.assert_array_equal(chunked, whole)


def test_chunked_scan_on_neuron_tensors_matches_cpu():
    args = _ssm_inputs(batch=2, channels=128, seq=64, states=2, seed=1)
    kernel = _ssm_kernel(16)
    on_device = kernel(*(torch.from_numpy(a).to("neuron") for a in args)).cpu().numpy()
    np.testing.assert_array_equal(on_device, simulate_kernel(kernel, *args))
    # The initial tile is an operand like any other: its load precedes the
    # scan in the estimate, and the program has one scan per chunk and state.
    assert kernel.last_profile.instructions["vector"] > 0


@nki.jit
def _scan_from_initial(x, init):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    start = nl.load(init)
    r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor_scan(r, t, t, initial=start, op0=np.subtract, op1=np.add)
    nl.store(out, r)
    return out


def test_tile_initial_per_partition_in_nki_operand_order():
    # NKI: result[:, 0] = op1(op0(data0[:, 0], initial), data1[:, 0]); op0 is
    # not commutative here, so the order shows.
    rng = np.random.default_rng(2)
    x = rng.random((64, 6), dtype=np.float32)
    init = rng.standard_normal((64, 1)).astype(np.float32)
    expected = np.empty_like(x)
    prev = init[:, 0]
    for j in range(6):
        prev = (x[:, j] - prev) + x[:, j]
        expected[:, j] = prev
    np.testing.assert_allclose(simulate_kernel(_scan_from_initial, x, init), expected, rtol=1e-6)


def test_tile_initial_of_the_wrong_shape_is_refused_at_its_line():
    x = np.ones((64, 6), np.float32)
    with pytest.raises(NKIError, match=r"initial \[64, 2\] must hold one value per partition") as e:
        simulate_kernel(_scan_from_initial, x, np.ones((64, 2), np.float32))
    assert e.value.lineno is not None and e.value.filename.endswith("test_nki_tutorials_more.py")


# tensor_indirection: gather columns at offsets read at run time ---------------------
@nki.jit
def _select_columns(index_tensor, data_tensor):
    """data[:, index[0]]: the index row becomes a [16, n / 16] tile (16
    offsets per column, down the partitions), repeated for every group of 16
    partitions, and one tensor_copy gathers through it."""
    n = index_tensor.shape[1]
    parts = data_tensor.shape[0]
    out = nl.ndarray((parts, n), dtype=data_tensor.dtype, buffer=nl.shared_hbm)
    data = nl.load(data_tensor)
    row = nl.load(index_tensor)
    rows16 = nl.ndarray((n // 16, 16), dtype=nl.uint16, buffer=nl.sbuf)
    for r in nl.static_range(n // 16):
        nisa.dma_copy(dst=rows16[r : r + 1, :], src=row[0:1, r * 16 : (r + 1) * 16])
    group = nl.ndarray((16, n // 16), dtype=nl.uint16, buffer=nl.sbuf)
    nisa.nc_transpose(dst=group, data=rows16, engine=nisa.engine.vector)
    offsets = nl.ndarray((parts, n // 16), dtype=nl.uint16, buffer=nl.sbuf)
    for g in nl.static_range(parts // 16):
        nisa.dma_copy(dst=offsets[g * 16 : (g + 1) * 16, :], src=group)
    picked = nl.ndarray((parts, n), dtype=data_tensor.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(picked, data.indirect(offsets, num_elem=n), engine=nisa.engine.vector)
    nl.store(out, value=picked)
    return out


def _indirection_inputs(parts=128, cols=64, n=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    index = torch.randint(0, cols, (1, n), dtype=torch.uint16, generator=g)
    data = torch.rand((parts, cols), dtype=torch.float32, generator=g)
    return index, data


def test_indirection_gathers_columns_on_cpu_tensors():
    index, data = _indirection_inputs()
    out = _select_columns(index, data)
    torch.testing.assert_close(out, data[:, index[0].to(torch.int64)], rtol=0, atol=0)


def test_indirection_on_neuron_tensors_repeats_and_reorders_columns():
    index, data = _indirection_inputs(parts=64, cols=20, n=48, seed=3)
    index[0, :4] = torch.tensor([19, 0, 19, 7], dtype=torch.uint16)
    out = _select_columns(index.to("neuron"), data.to("neuron")).cpu()
    torch.testing.assert_close(out, data[:, index[0].to(torch.int64)], rtol=0, atol=0)
    assert _select_columns.last_profile.instructions["vector"] >= 2


def test_offset_out_of_range_names_the_line_on_numpy():
    index, data = _indirection_inputs(cols=64)
    index[0, 9] = 64
    with pytest.raises(NKIError, match=r"offset 64 .* outside the 64 columns") as e:
        simulate_kernel(_select_columns, index.numpy(), data.numpy())
    assert e.value.filename.endswith("test_nki_tutorials_more.py")
    assert (
        "nisa.tensor_copy(picked" in open(e.value.filename).read().splitlines()[e.value.lineno - 1]
    )


def test_offset_out_of_range_is_a_device_error_naming_the_kernel():
    index, data = _indirection_inputs(cols=16)
    index[0, 0] = 300
    out = _select_columns(index.to("neuron"), data.to("neuron"))
    with pytest.raises(RuntimeError, match=r"_select_columns.*offset 300") as e:
        out.cpu()
    assert "test_nki_tutorials_more.py:" in str(e.value)
    # The device stays usable.
    assert torch.equal((torch.ones(3, device="neuron") * 2).cpu(), torch.full((3,), 2.0))


def _indirect_kernel(body):
    @nki.jit
    def kernel(data_tensor, index_tensor):
        out = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        data = nl.load(data_tensor)
        idx = nl.load(index_tensor)
        nl.store(out, body(data, idx))
        return out

    return kernel


def _run_indirect(body, index_dtype=np.uint16, parts=32):
    data = np.ones((parts, 16), np.float32)
    return simulate_kernel(_indirect_kernel(body), data, np.zeros((parts, 1), index_dtype))


def test_indirection_inside_other_instructions_is_not_supported_yet():
    def add(data, idx):
        return nl.add(data.indirect(idx, num_elem=16), 1.0)

    with pytest.raises(NKIError, match=r"tensor indirection.*not supported yet.*tensor_copy"):
        _run_indirect(add)


def test_indirection_index_tile_must_be_uint16():
    with pytest.raises(NKIError, match="offsets must be uint16, got int32"):
        _run_indirect(lambda d, i: lisa.tensor_copy(d.indirect(i)), index_dtype=np.int32)


def test_indirection_needs_whole_groups_of_16_partitions():
    with pytest.raises(NKIError, match="whole groups of 16 partitions"):
        _run_indirect(lambda d, i: lisa.tensor_copy(d.indirect(i)), parts=24)


def test_indirection_num_elem_beyond_the_index_tile_is_refused():
    with pytest.raises(NKIError, match=r"num_elem=17\): the index tile \[32, 1\] holds 16"):
        _run_indirect(lambda d, i: lisa.tensor_copy(d.indirect(i, num_elem=17)))


def test_tensor_valued_indices_read_the_index_at_run_time():
    # Dynamic DMA indexing (tests/test_nki_dynamic_indexing.py has the rest).
    @nki.jit
    def by_tile(x, idx):
        out = nl.ndarray((1, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        i = nl.load(idx)
        nl.store(out, nl.load(x[i, 0:4]))
        return out

    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    got = simulate_kernel(by_tile, x, np.full((1, 1), 6, np.int32))
    np.testing.assert_array_equal(got, x[6:7])

    @nki.jit
    def ds_from_tile(x, idx):
        out = nl.ndarray((1, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        i = nl.load(idx)
        nl.store(out, nl.load(x[nl.ds(i, 1), 0:4]))
        return out

    got = simulate_kernel(ds_from_tile, x, np.full((1, 1), 3, np.int32))
    np.testing.assert_array_equal(got, x[3:4])

    @nki.jit
    def on_chip(x, idx):
        out = nl.ndarray((1, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(out, nl.copy(t[nl.load(idx), 0:4]))
        return out

    with pytest.raises(NKIError, match="indexing an on-chip tile with a tile .* not supported yet"):
        simulate_kernel(on_chip, x, np.zeros((1, 1), np.int32))


# rotary: a sub-kernel writing a [2, par_dim(P), F] block tile, masked tails -------
@nki.jit
def _rotate_both(q_tile, k_tile, cos_tile, sin_tile, out_tile):
    """out_tile[0] = rotate-half(q), out_tile[1] = rotate-half(k): written
    into the caller's tile (a kernel called from a kernel is inlined)."""
    half = q_tile.shape[-1] // 2
    for j, x in enumerate((q_tile, k_tile)):
        out_tile[j, :, :] = x * cos_tile
        out_tile[j, :, :half] = out_tile[j, :, :half] + (-1 * x[:, half:] * sin_tile[:, :half])
        out_tile[j, :, half:] = out_tile[j, :, half:] + (x[:, :half] * sin_tile[:, half:])


@nki.jit
def _rope_qk(q, k, cos, sin):
    b = nl.program_id(axis=0)
    h = nl.program_id(axis=1)
    seq, dim = q.shape[2], q.shape[3]
    out = nl.ndarray([2] + list(q.shape), dtype=q.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(dim)[None, :]
    for t in nl.affine_range(0, (seq + 127) // 128):
        rows = t * nl.tile_size.pmax + i_p
        keep = rows < seq
        q_tile = nl.load(q[b, h][rows, i_f], mask=keep)
        k_tile = nl.load(k[b, h][rows, i_f], mask=keep)
        cos_tile = nl.load(cos[b][rows, i_f], mask=keep)
        sin_tile = nl.load(sin[b][rows, i_f], mask=keep)
        both = nl.ndarray([2, nl.par_dim(128), dim], dtype=q.dtype, buffer=nl.sbuf)
        _rotate_both(q_tile, k_tile, cos_tile, sin_tile, both)
        nl.store(out[0, b, h][rows, i_f], both[0, :, :], mask=keep)
        nl.store(out[1, b, h][rows, i_f], both[1, :, :], mask=keep)
    return out


def _rope_reference(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None] + rotated * sin[:, None]


@pytest.mark.parametrize("seq", [64, 200])
def test_rotary_tutorial_style_on_neuron_tensors(seq):
    batch, heads, dim = 2, 3, 64
    g = torch.Generator().manual_seed(seq)
    q, k = (torch.randn(batch, heads, seq, dim, generator=g) for _ in range(2))
    pos = torch.arange(seq, dtype=torch.float32)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1).expand(batch, seq, dim).contiguous()
    cos, sin = emb.cos(), emb.sin()
    out = _rope_qk[batch, heads](*(t.to("neuron") for t in (q, k, cos, sin))).cpu()
    torch.testing.assert_close(out[0], _rope_reference(q, cos, sin), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out[1], _rope_reference(k, cos, sin), rtol=1e-5, atol=1e-5)


def test_indirect_destination_scatter_is_not_supported_yet():
    @nki.jit
    def scatter(data_tensor, index_tensor):
        out = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        data = nl.load(data_tensor)
        idx = nl.load(index_tensor)
        nisa.tensor_copy(data.indirect(idx, num_elem=16), data)
        nl.store(out, data)
        return out

    with pytest.raises(NKIError, match=r"writing through \(a scatter\) of a tensor indirection"):
        simulate_kernel(scatter, np.ones((32, 16), np.float32), np.zeros((32, 1), np.uint16))
