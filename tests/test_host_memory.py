"""Host memory: the caching pinned allocator, asynchronous copies, DataLoader pinning.

A pinned block freed while a queued non_blocking copy still uses it must not be
handed out again before that copy has run; the ``busy`` fixture keeps the stream
occupied so that the copies are still queued when the tests free their buffers.
"""

from __future__ import annotations

import gc
import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

N = torch.neuron
NUMEL = 1 << 16  # 256 KiB of float32: a size class of its own in these tests


@pytest.fixture(autouse=True)
def _quiet_device():
    gc.collect()
    N.synchronize()
    yield
    N.synchronize()


def stream_idle() -> bool:
    return N.current_stream().query()


# --- pinned memory ------------------------------------------------------------------


def test_pin_memory_and_is_pinned():
    cpu = torch.arange(100.0)
    pinned = cpu.pin_memory()
    assert pinned.is_pinned() and not cpu.is_pinned()
    assert torch.equal(pinned, cpu)
    assert pinned[10:].is_pinned() and pinned.view(10, 10).t().is_pinned()
    assert pinned.pin_memory() is pinned  # already pinned: no copy
    assert not torch.ones(3, device="neuron").is_pinned()
    assert torch.empty(5, pin_memory=True).is_pinned()
    assert torch.ones(4).untyped_storage().pin_memory().is_pinned()


def test_freed_block_is_reused():
    a = torch.empty(NUMEL).pin_memory()
    ptr = a.data_ptr()
    allocs = N.host_memory_stats()["num_host_alloc"]
    del a
    b = torch.empty(NUMEL).pin_memory()
    assert b.data_ptr() == ptr
    assert N.host_memory_stats()["num_host_alloc"] == allocs


def test_block_of_queued_upload_is_not_reused_early(busy_fn):
    busy_fn()
    src = torch.full((NUMEL,), 1.0).pin_memory()
    ptr = src.data_ptr()
    dst = torch.empty(NUMEL, device="neuron")
    dst.copy_(src, non_blocking=True)
    assert not stream_idle()  # the copy is queued behind the busy work
    del src  # freed while the copy that reads it is still queued
    again = torch.empty(NUMEL).pin_memory()
    assert again.data_ptr() != ptr
    again.fill_(2.0)  # had the block been reused, the copy would read 2s
    assert dst.cpu().eq(1.0).all()


def test_block_of_queued_download_is_not_reused_early(busy_fn):
    busy_fn()
    src = torch.full((NUMEL,), 5.0, device="neuron")
    dst = torch.empty(NUMEL).pin_memory()
    ptr = dst.data_ptr()
    dst.copy_(src, non_blocking=True)
    assert not stream_idle()
    del dst  # freed while the copy that writes it is still queued
    again = torch.empty(NUMEL).pin_memory()
    assert again.data_ptr() != ptr
    again.fill_(7.0)  # had the block been reused, the copy would overwrite it
    N.synchronize()
    assert again.eq(7.0).all()


def test_recycled_buffers_under_a_stream_of_uploads(busy_fn):
    # What a data loader does: pin, upload asynchronously, drop, repeat.
    busy_fn(6)
    outs = []
    blocks = set()
    for i in range(24):
        h = torch.full((NUMEL,), float(i)).pin_memory()
        blocks.add(h.data_ptr())
        outs.append(h.to("neuron", non_blocking=True))
        del h
    got = torch.stack(outs).cpu()
    expected = torch.arange(24.0)[:, None].expand(24, NUMEL)
    assert torch.equal(got, expected)
    # Once the copies have run, the blocks serve new requests without new host
    # memory. (On a loaded machine the stream may catch up during the loop, so
    # blocks are already reused there: fewer than 24 exist.)
    allocs = N.host_memory_stats()["num_host_alloc"]
    keep = [torch.empty(NUMEL).pin_memory() for _ in range(24)]
    assert N.host_memory_stats()["num_host_alloc"] - allocs <= 24 - len(blocks)
    assert len({k.data_ptr() for k in keep}) == 24  # all alive at once


def test_non_blocking_copies_are_asynchronous_both_ways(busy_fn):
    busy_fn()
    h = torch.arange(float(NUMEL)).pin_memory()
    d = h.to("neuron", non_blocking=True)
    assert not stream_idle()  # returned without waiting for the device
    back = torch.empty(NUMEL).pin_memory()
    back.copy_(d * 2, non_blocking=True)
    assert not stream_idle()
    out = (d + 1).to("cpu", non_blocking=True)
    assert out.is_pinned()  # torch allocates the destination in pinned memory
    assert not stream_idle()
    N.synchronize()
    assert torch.equal(back, h * 2)
    assert torch.equal(out, h + 1)


def test_blocking_copies_wait(busy_fn):
    busy_fn()
    d = torch.ones(NUMEL, device="neuron")
    back = torch.empty(NUMEL).pin_memory()
    back.copy_(d)  # non_blocking=False: a sync point, even into pinned memory
    assert stream_idle()
    assert back.eq(1.0).all()
    busy_fn()
    pageable = torch.full((NUMEL,), 3.0)
    d = pageable.to("neuron", non_blocking=True)  # pageable: staged at the call
    pageable.fill_(0.0)
    assert d.cpu().eq(3.0).all()


def test_async_copy_of_conjugate_and_strided_pinned_views(busy_fn):
    busy_fn(4)
    z = torch.randn(8, 6, dtype=torch.complex64).pin_memory()
    d = z.t().conj().to("neuron", non_blocking=True)
    assert torch.equal(d.cpu(), z.t().conj())
    out = torch.empty(6, 8, dtype=torch.complex64).pin_memory()
    out.t().copy_(d.t(), non_blocking=True)
    N.synchronize()
    assert torch.equal(out, z.t().conj().resolve_conj())


# --- statistics and empty_host_cache ------------------------------------------------------


def test_host_memory_stats_and_empty_host_cache():
    torch.accelerator.empty_host_cache()
    s0 = N.host_memory_stats()
    a = torch.empty(3000).pin_memory()  # 12000 bytes: a 16 KiB block
    s1 = N.host_memory_stats()
    assert s1["active_requests.current"] == s0["active_requests.current"] + 1
    assert s1["active_bytes.current"] == s0["active_bytes.current"] + 16384
    assert s1["allocated_bytes.current"] == s0["allocated_bytes.current"] + 16384
    assert s1["num_host_alloc"] == s0["num_host_alloc"] + 1
    assert s1["host_alloc_time.count"] == s0["host_alloc_time.count"] + 1
    del a
    s2 = N.host_memory_stats()
    assert s2["active_requests.current"] == s0["active_requests.current"]
    assert s2["allocated_bytes.current"] == s1["allocated_bytes.current"]  # cached
    torch.accelerator.empty_host_cache()
    s3 = N.host_memory_stats()
    assert s3["allocated_bytes.current"] == s0["allocated_bytes.current"]
    assert s3["num_host_free"] == s0["num_host_free"] + 1
    nested = N.host_memory_stats_as_nested_dict()
    assert nested["allocations"]["current"] == s3["allocations.current"]
    N.reset_peak_host_memory_stats()
    assert N.host_memory_stats()["allocated_bytes.peak"] == s3["allocated_bytes.current"]
    N.reset_accumulated_host_memory_stats()
    assert N.host_memory_stats()["num_host_alloc"] == 0


def test_empty_host_cache_keeps_blocks_of_queued_copies(busy_fn):
    busy_fn()
    src = torch.full((NUMEL,), 4.0).pin_memory()
    dst = torch.empty(NUMEL, device="neuron")
    dst.copy_(src, non_blocking=True)
    del src
    freed = N.host_memory_stats()["num_host_free"]
    torch.accelerator.empty_host_cache()  # the block's copy has not run: kept
    assert N.host_memory_stats()["num_host_free"] == freed
    assert dst.cpu().eq(4.0).all()
    torch.accelerator.empty_host_cache()  # now it can go
    assert N.host_memory_stats()["num_host_free"] >= freed + 1


# --- DataLoader ------------------------------------------------------------------------


class Pairs(Dataset):
    def __len__(self) -> int:
        return 96

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(16, generator=g), torch.randint(0, 4, (), generator=g)


def train(loader, device: str, non_blocking: bool) -> list[float]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in loader:
        if device == "neuron":
            assert x.is_pinned() and y.is_pinned()
        x = x.to(device, non_blocking=non_blocking)
        y = y.to(device, non_blocking=non_blocking)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return [float(loss) for loss in losses]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloader_pin_memory_feeds_training(num_workers):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = DataLoader(Pairs(), batch_size=8, pin_memory=True, num_workers=num_workers)
        got = train(loader, "neuron", non_blocking=True)
    # Python >= 3.12 warns when a process with threads forks (the device's stream
    # workers are threads, as CUDA's are): Python's warning, not the loader's.
    assert [
        str(w.message)
        for w in caught
        if "use of fork() may lead to deadlocks" not in str(w.message)
    ] == []
    expected = train(DataLoader(Pairs(), batch_size=8), "cpu", non_blocking=False)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_dataloader_pin_memory_device_neuron():
    # torch 2.13 deprecates pin_memory_device for every device (CUDA included) and
    # pins for the current accelerator, which is neuron: that warning is the only one.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = DataLoader(Pairs(), batch_size=8, pin_memory=True, pin_memory_device="neuron")
        got = train(loader, "neuron", non_blocking=True)
    messages = [str(w.message) for w in caught]
    assert messages and all("pin_memory_device is deprecated" in m for m in messages)
    expected = train(DataLoader(Pairs(), batch_size=8), "cpu", non_blocking=False)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
