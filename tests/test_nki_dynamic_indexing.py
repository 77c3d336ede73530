"""Dynamic and indirect DMA indexing in NKI kernels, in the vendor's forms:
an index loaded from a tensor as an integer (``cache[idx, ...]``, the
KV-cache update) or as the start of ``nl.ds``; a tile of indices selecting one
row per partition (``data[idx_tile[i_p, 0], i_f]``: a gather on load, a
scatter on store, the ``nl.load`` / ``nl.store`` pages' indirect DMA
examples); and ``t.ap(..., scalar_offset= | vector_offset=, indirect_dim=)``
moved by ``nisa.dma_copy``. Each is checked against PyTorch on the CPU, on
NumPy (simulate_kernel), on neuron tensors (wrap_nki) and under
torch.compile; an index out of range is an error naming the kernel line."""

import neuronxcc.nki.isa as lisa
import neuronxcc.nki.typing as nt
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest
import torch
from neuronxcc.nki import simulate_kernel

import torch_neuronx.nki as tnki
from torch_neuronx import wrap_nki
from torch_neuronx.nki import NKIError

THIS = "test_nki_dynamic_indexing.py"


def _line(e) -> str:
    return open(e.filename).read().splitlines()[e.lineno - 1]


# KV-cache update: a scalar position read at run time ------------------------
@nki.jit
def kv_cache_update(cache: nt.mutable_tensor, pos, new_kv):
    """cache[pos] = new_kv: cache [S, H, D], pos [1, 1] int32, new_kv [H, D]."""
    idx = nl.load(pos[0:1, 0:1])
    kv = nl.load(new_kv)
    nl.store(cache[idx, :, :], value=kv)
    return cache


def _kv_inputs(S=16, H=8, D=32, p=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    cache = torch.rand((S, H, D), generator=g)
    new_kv = torch.rand((H, D), generator=g)
    pos = torch.tensor([[p]], dtype=torch.int32)
    return cache, pos, new_kv


def _kv_reference(cache, pos, new_kv):
    ref = cache.clone()
    ref[int(pos[0, 0])] = new_kv
    return ref


def test_kv_cache_update_on_cpu_tensors_and_numpy():
    cache, pos, new_kv = _kv_inputs()
    ref = _kv_reference(cache, pos, new_kv)
    out = simulate_kernel(kv_cache_update, cache.numpy().copy(), pos.numpy(), new_kv.numpy())
    np.testing.assert_array_equal(out, ref.numpy())
    c = cache.clone()
    assert kv_cache_update(c, pos, new_kv) is c
    torch.testing.assert_close(c, ref, rtol=0, atol=0)


def test_kv_cache_update_on_neuron_each_position_without_retracing():
    cache, _, new_kv = _kv_inputs(S=6)
    dev = cache.to("neuron")
    ref = cache.clone()
    kv_cache_update._cache.clear()
    for p in (0, 5, 2):  # the position is data: one traced program for all
        pos = torch.tensor([[p]], dtype=torch.int32)
        kv = new_kv + p
        out = wrap_nki(kv_cache_update)(dev, pos.to("neuron"), kv.to("neuron"))
        ref[p] = kv
        assert out is dev
        torch.testing.assert_close(dev.cpu(), ref, rtol=0, atol=0)
    assert len(kv_cache_update._cache) == 1


def test_kv_cache_update_under_torch_compile():
    step = wrap_nki(kv_cache_update)

    @torch.compile(backend="neuron", fullgraph=True)
    def f(cache, pos, kv):
        step(cache, pos, kv * 2)
        return cache.sum(dim=(1, 2))

    cache, pos, new_kv = _kv_inputs(S=8, p=7)
    ref = _kv_reference(cache, pos, new_kv * 2)
    dev = cache.to("neuron")
    sums = f(dev, pos.to("neuron"), new_kv.to("neuron"))
    torch.testing.assert_close(dev.cpu(), ref)
    torch.testing.assert_close(sums.cpu(), ref.sum(dim=(1, 2)))


@nki.jit
def read_row(cache, pos):
    """nisa.dma_copy of cache[idx, :] ([D]) into a [1, D] tile."""
    out = nl.ndarray((1, cache.shape[1]), dtype=cache.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=pos)
    row = nl.ndarray((1, cache.shape[1]), dtype=cache.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=row, src=cache[idx, :])
    nisa.dma_copy(dst=out, src=row)
    return out


def test_dma_copy_reads_a_row_at_a_run_time_position():
    cache = torch.rand((9, 40), generator=torch.Generator().manual_seed(9))
    for p in (8, 0):
        out = read_row(cache, torch.tensor([[p]], dtype=torch.int32))
        torch.testing.assert_close(out, cache[p : p + 1], rtol=0, atol=0)


# nl.ds with a start read at run time -------------------------------------
@nki.jit
def window_roll(cache: nt.mutable_tensor, start, rows):
    """Reads cache[start : start + n] (returned) and writes rows there."""
    n = rows.shape[0]
    out = nl.ndarray((n, cache.shape[1]), dtype=cache.dtype, buffer=nl.shared_hbm)
    s = nl.load(start)
    old = nl.load(cache[nl.ds(s, n), :])
    nl.store(out, value=old)
    nl.store(cache[nl.ds(s, n), :], value=nl.load(rows))
    return out, cache


def test_ds_with_a_run_time_start_loads_and_stores_a_window():
    g = torch.Generator().manual_seed(1)
    cache, rows = torch.rand((40, 24), generator=g), torch.rand((8, 24), generator=g)
    start = torch.tensor([[13]], dtype=torch.int32)
    ref = cache.clone()
    ref[13:21] = rows
    out, c = window_roll(cache.clone(), start, rows)
    torch.testing.assert_close(out, cache[13:21], rtol=0, atol=0)
    torch.testing.assert_close(c, ref, rtol=0, atol=0)
    dev = cache.to("neuron")
    out_d, _ = wrap_nki(window_roll)(dev, start.to("neuron"), rows.to("neuron"))
    torch.testing.assert_close(out_d.cpu(), cache[13:21], rtol=0, atol=0)
    torch.testing.assert_close(dev.cpu(), ref, rtol=0, atol=0)


def test_ds_window_past_the_end_is_a_run_time_error_naming_the_line():
    cache, rows = np.zeros((40, 24), np.float32), np.ones((8, 24), np.float32)
    with pytest.raises(NKIError, match=r"index 33 .*positions 33\.\.40 of dimension 0 .* size 40"):
        simulate_kernel(window_roll, cache, np.array([[33]], np.int32), rows)
    ok = simulate_kernel(window_roll, cache, np.array([[32]], np.int32), rows)  # last fit
    np.testing.assert_array_equal(ok[1][32:], rows)


# Indirect DMA: nl.load / nl.store pages' examples -----------------------------
@nki.jit
def indirect_read_example_1(data_tensor, idx_tensor):
    """nl.load's "Indirect DMA read example 1": data_tensor [128, 512] on HBM,
    idx_tensor [64] of row indices loaded into an SBUF [64, 1] tile."""
    out = nl.ndarray((64, 512), dtype=data_tensor.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(64)[:, None]
    i_f = nl.arange(512)[None, :]
    idx_tile = nl.load(idx_tensor[i_p])  # indices have to be in SBUF
    data_tile = nl.load(data_tensor[idx_tile[i_p, 0], i_f])
    nl.store(out[i_p, i_f], value=data_tile)
    return out


@nki.jit
def indirect_read_example_2(data_tensor):
    """nl.load's "Indirect DMA read example 2": indices [[0], [2], [4], ...]
    generated by iota."""
    out = nl.ndarray((64, 512), dtype=data_tensor.dtype, buffer=nl.shared_hbm)
    i_f = nl.arange(512)[None, :]
    idx_expr = 2 * nl.arange(64)[:, None]
    idx_tile = lisa.iota(idx_expr, dtype=np.int32)
    data_tile = nl.load(data_tensor[idx_tile, i_f])
    nl.store(out, value=data_tile)
    return out


@nki.jit
def indirect_write_example_1(data_tensor: nt.mutable_tensor, idx_tensor, values):
    """nl.store's "Indirect DMA write example 1": a [64, 512] tile scattered
    into the rows idx_tensor names."""
    i_p = nl.arange(64)[:, None]
    i_f = nl.arange(512)[None, :]
    idx_tile = nl.load(idx_tensor[i_p])  # indices have to be in SB
    data_tile = nl.load(values)
    nl.store(data_tensor[idx_tile[i_p, 0], i_f], value=data_tile[0:64, 0:512])
    return data_tensor


def _rows(seed=2):
    g = torch.Generator().manual_seed(seed)
    data = torch.rand((128, 512), generator=g)
    idx = torch.randperm(128, generator=g)[:64].to(torch.int32)
    return data, idx


def test_gather_rows_read_example_1_everywhere():
    data, idx = _rows()
    idx[:3] = torch.tensor([127, 0, 127], dtype=torch.int32)  # repeats and both ends
    ref = data[idx.long()]
    torch.testing.assert_close(indirect_read_example_1(data, idx), ref, rtol=0, atol=0)
    np.testing.assert_array_equal(
        simulate_kernel(indirect_read_example_1, data.numpy(), idx.numpy()), ref.numpy()
    )
    out = wrap_nki(indirect_read_example_1)(data.to("neuron"), idx.to("neuron"))
    torch.testing.assert_close(out.cpu(), ref, rtol=0, atol=0)


def test_gather_with_iota_indices_read_example_2():
    data, _ = _rows()
    out = indirect_read_example_2(data)
    torch.testing.assert_close(out, data[0:128:2], rtol=0, atol=0)


def test_scatter_rows_write_example_1_everywhere():
    data, idx = _rows(3)
    values = torch.rand((64, 512), generator=torch.Generator().manual_seed(4))
    ref = data.clone()
    ref[idx.long()] = values
    got = simulate_kernel(
        indirect_write_example_1, data.numpy().copy(), idx.numpy(), values.numpy()
    )
    np.testing.assert_array_equal(got, ref.numpy())
    dev = data.to("neuron")
    wrap_nki(indirect_write_example_1)(dev, idx.to("neuron"), values.to("neuron"))
    torch.testing.assert_close(dev.cpu(), ref, rtol=0, atol=0)
    # Rows not named keep their values.
    untouched = torch.ones(128, dtype=torch.bool)
    untouched[idx.long()] = False
    torch.testing.assert_close(dev.cpu()[untouched], data[untouched], rtol=0, atol=0)


@nki.jit
def embedding_lookup(table, token_ids):
    """An embedding layer: out[t] = table[token_ids[t]], 128 tokens per tile."""
    n, d = token_ids.shape[0], table.shape[1]
    out = nl.ndarray((n, d), dtype=table.dtype, buffer=nl.shared_hbm)
    i_f = nl.arange(d)[None, :]
    for t in nl.affine_range(n // 128):
        i_p = t * 128 + nl.arange(128)[:, None]
        ids = nl.load(token_ids[i_p, 0:1])
        rows = nl.load(table[ids, i_f])
        nl.store(out[i_p, i_f], value=rows)
    return out


def test_embedding_lookup_matches_torch_embedding_under_compile():
    g = torch.Generator().manual_seed(5)
    table = torch.randn((1000, 64), generator=g)
    ids = torch.randint(0, 1000, (256, 1), generator=g, dtype=torch.int32)
    ref = torch.nn.functional.embedding(ids[:, 0].long(), table)
    lookup = wrap_nki(embedding_lookup)

    @torch.compile(backend="neuron", fullgraph=True)
    def f(table, ids):
        return lookup(table, ids) * 2

    out = f(table.to("neuron"), ids.to("neuron"))
    torch.testing.assert_close(out.cpu(), 2 * ref)


# nisa.dma_copy with run-time access patterns ---------------------------------
@nki.jit
def ap_gather(table, ids):
    """The vendor library's gather: one indirect DMA of a row per partition."""
    k, d = ids.shape[0], table.shape[1]
    out = nl.ndarray((k, d), dtype=table.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray((k, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=ids)
    rows = nl.ndarray((k, d), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(
        dst=rows,
        src=table.ap(pattern=[[d, k], [1, d]], offset=0, vector_offset=idx, indirect_dim=0),
    )
    nisa.dma_copy(dst=out, src=rows)
    return out


@nki.jit
def ap_select_expert(weights, expert):
    """weights[expert] of [E, P, F] through ap(scalar_offset=, indirect_dim=0)."""
    _, p, f = weights.shape
    out = nl.ndarray((p, f), dtype=weights.dtype, buffer=nl.shared_hbm)
    e = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=e, src=expert)
    w = nl.ndarray((p, f), dtype=weights.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=w, src=weights.ap(pattern=[[f, p], [1, f]], scalar_offset=e, indirect_dim=0))
    nisa.dma_copy(dst=out, src=w)
    return out


def test_ap_vector_offset_gathers_rows():
    g = torch.Generator().manual_seed(6)
    table = torch.rand((300, 48), generator=g)
    ids = torch.randint(0, 300, (96, 1), generator=g, dtype=torch.int32)
    ref = table[ids[:, 0].long()]
    torch.testing.assert_close(ap_gather(table, ids), ref, rtol=0, atol=0)
    out = wrap_nki(ap_gather)(table.to("neuron"), ids.to("neuron"))
    torch.testing.assert_close(out.cpu(), ref, rtol=0, atol=0)


def test_ap_scalar_offset_selects_an_expert():
    w = torch.rand((5, 32, 16), generator=torch.Generator().manual_seed(7))
    for e in (0, 4, 2):
        out = ap_select_expert(w, torch.tensor([[e]], dtype=torch.int32))
        torch.testing.assert_close(out, w[e], rtol=0, atol=0)
    with pytest.raises(NKIError, match=r"index 5 .* dimension 0 of the source, which has size 5"):
        ap_select_expert(w, torch.tensor([[5]], dtype=torch.int32))


@nki.jit
def ap_gather_skip(table, ids):
    """oob_mode.skip: rows whose index is out of range are left as they were
    (here zero), as the vendor's gathers with padding indices rely on."""
    k, d = ids.shape[0], table.shape[1]
    out = nl.ndarray((k, d), dtype=table.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray((k, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=ids)
    rows = nl.ndarray((k, d), dtype=table.dtype, buffer=nl.sbuf)
    nisa.memset(dst=rows, value=0.0)
    nisa.dma_copy(
        dst=rows,
        src=table.ap(pattern=[[d, k], [1, d]], offset=0, vector_offset=idx, indirect_dim=0),
        oob_mode=nisa.oob_mode.skip,
    )
    nisa.dma_copy(dst=out, src=rows)
    return out


def test_oob_mode_skip_leaves_out_of_range_rows():
    table = torch.rand((10, 8), generator=torch.Generator().manual_seed(8))
    ids = torch.tensor([[3], [10], [-1], [9]], dtype=torch.int32)
    out = ap_gather_skip(table, ids)
    torch.testing.assert_close(out[0], table[3], rtol=0, atol=0)
    torch.testing.assert_close(out[3], table[9], rtol=0, atol=0)
    assert torch.count_nonzero(out[1:3]) == 0


# Out-of-bounds indices ----------------------------------------------------
def test_kv_position_out_of_range_names_the_store_line_on_numpy():
    cache, pos, new_kv = _kv_inputs(S=16)
    with pytest.raises(NKIError, match=r"index 16 read at run time .* dimension 0 .* size 16") as e:
        simulate_kernel(kv_cache_update, cache.numpy(), np.array([[16]], np.int32), new_kv.numpy())
    assert e.value.filename.endswith(THIS) and e.value.limit == "out-of-bounds"
    assert "nl.store(cache[idx, :, :]" in _line(e.value)
    with pytest.raises(NKIError, match=r"index -1 read at run time"):
        simulate_kernel(kv_cache_update, cache.numpy(), np.array([[-1]], np.int32), new_kv.numpy())


def test_gather_row_out_of_range_names_the_row_and_line():
    data, idx = _rows()
    idx[17] = 128
    with pytest.raises(NKIError, match=r"index 128 .*index tile row 17.* size 128") as e:
        indirect_read_example_1(data, idx)
    assert "nl.load(data_tensor[idx_tile[i_p, 0], i_f])" in _line(e.value)


def test_out_of_range_on_neuron_is_a_device_error_and_the_device_stays_usable():
    cache, _, new_kv = _kv_inputs(S=4)
    dev = cache.to("neuron")
    wrap_nki(kv_cache_update)(
        dev, torch.tensor([[9]], dtype=torch.int32).to("neuron"), new_kv.to("neuron")
    )
    with pytest.raises(RuntimeError, match=r"kv_cache_update.*index 9 read at run time") as e:
        dev.cpu()
    assert f"{THIS}:" in str(e.value)
    # Nothing was written, and the device runs the next kernel.
    torch.testing.assert_close(dev.cpu(), cache, rtol=0, atol=0)
    pos = torch.tensor([[3]], dtype=torch.int32)
    wrap_nki(kv_cache_update)(dev, pos.to("neuron"), new_kv.to("neuron"))
    torch.testing.assert_close(dev.cpu(), _kv_reference(cache, pos, new_kv), rtol=0, atol=0)


# What is refused at the call, with the line ---------------------------------
def _refused(body, *args):
    @nki.jit
    def kernel(data, ids):
        out = nl.ndarray((4, data.shape[1]), dtype=data.dtype, buffer=nl.shared_hbm)
        body(data, ids, out)
        return out

    with pytest.raises(NKIError) as e:
        simulate_kernel(kernel, *args)
    assert e.value.filename.endswith(THIS)
    return str(e.value)


_DATA = np.ones((16, 8), np.float32)
_IDS = np.zeros((4, 1), np.int32)


def test_index_tile_in_hbm_is_refused():
    def body(data, ids, out):
        nl.store(out, value=nl.load(data[ids[0:4, 0:1], 0:8]))

    assert "must be in SBUF, but it is in HBM" in _refused(body, _DATA, _IDS)


def test_float_index_tile_is_refused():
    def body(data, ids, out):
        f = nl.load(ids, dtype=nl.float32)
        nl.store(out, value=nl.load(data[f, 0:8]))

    assert "integer tile (int32 or uint32), got float32" in _refused(body, _DATA, _IDS)


def test_compute_on_a_dynamically_indexed_tensor_is_refused():
    def body(data, ids, out):
        i = nl.load(ids[0:1, 0:1])
        nisa.dma_copy(dst=out[0:1, :], src=data[i, :], dst_rmw_op=nl.add)

    msg = _refused(body, _DATA, _IDS)
    assert "dst_rmw_op" in msg and "not supported yet" in msg


def test_two_run_time_indices_in_one_access_are_refused():
    def body(data, ids, out):
        i = nl.load(ids[0:1, 0:1])
        nl.store(out[0:1, 0:1], value=nl.load(data[i, i]))

    assert "more than one index read at run time" in _refused(body, _DATA, _IDS)


def test_ds_longer_than_the_dimension_is_refused_at_the_call():
    def body(data, ids, out):
        i = nl.load(ids[0:1, 0:1])
        nl.store(out, value=nl.load(data[0:4, nl.ds(i, 9)]))

    assert "size 8, and the access reaches 9 positions" in _refused(body, _DATA, _IDS)


# Cost model: descriptor-driven transfers ------------------------------------
def _spec(*shape, dtype=nl.float32):
    return nt.tensor[list(shape), dtype]


@nki.jit
def contiguous_rows(table, ids):
    """The same bytes as embedding_lookup's gather, from contiguous rows."""
    n, d = ids.shape[0], table.shape[1]
    out = nl.ndarray((n, d), dtype=table.dtype, buffer=nl.shared_hbm)
    i_f = nl.arange(d)[None, :]
    for t in nl.affine_range(n // 128):
        i_p = t * 128 + nl.arange(128)[:, None]
        _ = nl.load(ids[i_p, 0:1])
        nl.store(out[i_p, i_f], value=nl.load(table[i_p, i_f]))
    return out


def test_a_gather_costs_per_row_descriptors_over_a_contiguous_load():
    args = (_spec(1024, 64), _spec(128, 1, dtype=nl.int32))
    gather = tnki.estimate(embedding_lookup, *args)
    dense = tnki.estimate(contiguous_rows, *args)
    assert gather.instructions["dma"] == dense.instructions["dma"] == 3
    # 128 descriptors of 256-byte rows (each moves like a 512-byte one) and
    # the index read, against one transfer.
    assert gather.busy_us["dma"] > dense.busy_us["dma"] + 128 * 64 / 1.2e3 - 1e-3
    # The gather's rows read whatever rows: twice the rows, twice the cost.
    bigger = tnki.estimate(embedding_lookup, _spec(1024, 64), _spec(256, 1, dtype=nl.int32))
    assert bigger.busy_us["dma"] > 1.8 * gather.busy_us["dma"] - 3 * 0.6


def test_a_scalar_dynamic_dma_adds_only_the_index_read():
    s = tnki.estimate(
        kv_cache_update, _spec(64, 8, 128), _spec(1, 1, dtype=nl.int32), _spec(8, 128)
    )
    assert s.instructions["dma"] == 3
    static = s.busy_us["dma"]
    # One index read (140 GpSimd cycles) on top of three ordinary DMAs.
    assert 140 / 1.2e3 <= static - 3 * 0.6 < 1.0
