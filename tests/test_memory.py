"""Device memory: CUDA-style statistics, out-of-memory errors, the caching allocator."""

import gc
import json

import pytest
import torch

MIB = 1 << 20
N = torch.neuron


def _rounded(nbytes: int) -> int:
    # Like CUDA's allocator: blocks are multiples of 512 bytes.
    return max(512, (nbytes + 511) // 512 * 512)


@pytest.fixture(autouse=True)
def _quiet_device():
    gc.collect()
    N.synchronize()
    yield
    N.set_stream(N.default_stream())


@pytest.mark.parametrize(
    ("numel", "dtype"),
    [(1, torch.uint8), (1000, torch.float32), (333, torch.float64), (4096, torch.int16)],
)
def test_allocated_grows_by_rounded_size(numel, dtype):
    before = N.memory_allocated()
    x = torch.empty(numel, dtype=dtype, device="neuron")
    nbytes = numel * x.element_size()
    assert N.memory_allocated() - before == _rounded(nbytes)
    assert N.memory_reserved() >= N.memory_allocated()
    assert N.max_memory_allocated() >= N.memory_allocated()
    del x
    assert N.memory_allocated() == before


def test_allocated_counts_results_of_ops():
    a = torch.randn(256, device="neuron")
    before = N.memory_allocated()
    b = a * 2  # one new 1 KiB result
    assert N.memory_allocated() - before == 1024
    torch.testing.assert_close(b.cpu(), a.cpu() * 2)
    del b
    assert N.memory_allocated() == before


def test_large_allocation_and_empty_cache():
    N.empty_cache()
    alloc0, reserved0 = N.memory_allocated(), N.memory_reserved()
    free0 = N.mem_get_info()[0]
    x = torch.empty(8 * MIB, dtype=torch.uint8, device="neuron")
    assert N.memory_allocated() - alloc0 == 8 * MIB
    assert N.memory_reserved() - reserved0 >= 8 * MIB
    assert N.mem_get_info()[0] <= free0 - 8 * MIB
    del x
    # Freed memory goes back to the cache, not to the device.
    assert N.memory_allocated() == alloc0
    assert N.memory_reserved() - reserved0 >= 8 * MIB
    N.empty_cache()
    assert N.memory_reserved() == reserved0
    assert N.mem_get_info()[0] == free0


def test_peak_and_reset_peak():
    N.reset_peak_memory_stats()
    base = N.memory_allocated()
    assert N.max_memory_allocated() == base
    x = torch.empty(4 * MIB, dtype=torch.uint8, device="neuron")
    del x
    assert N.max_memory_allocated() >= base + 4 * MIB
    assert N.max_memory_reserved() >= N.memory_reserved()
    N.reset_peak_memory_stats()
    assert N.max_memory_allocated() == N.memory_allocated() == base
    assert N.max_memory_reserved() == N.memory_reserved()


def test_memory_stats_keys_and_consistency():
    x = torch.empty(1000, device="neuron")
    s = N.memory_stats()
    for key in (
        "allocated_bytes.all.current",
        "allocated_bytes.all.peak",
        "allocated_bytes.small_pool.current",
        "allocated_bytes.large_pool.current",
        "reserved_bytes.all.current",
        "active_bytes.all.current",
        "requested_bytes.all.current",
        "allocation.all.current",
        "segment.all.current",
        "num_ooms",
        "num_alloc_retries",
    ):
        assert key in s, key
    assert s["allocated_bytes.all.current"] == N.memory_allocated()
    assert s["reserved_bytes.all.current"] == N.memory_reserved()
    assert (
        s["allocated_bytes.small_pool.current"] + s["allocated_bytes.large_pool.current"]
        == s["allocated_bytes.all.current"]
    )
    assert s["requested_bytes.all.current"] <= s["allocated_bytes.all.current"]
    before = s["allocation.all.current"]
    y = torch.empty(10, device="neuron")
    assert N.memory_stats()["allocation.all.current"] == before + 1
    del x, y


def test_reset_accumulated_memory_stats():
    torch.empty(1000, device="neuron")
    assert N.memory_stats()["allocation.all.allocated"] > 0
    N.reset_accumulated_memory_stats()
    assert N.memory_stats()["allocation.all.allocated"] == 0


def test_memory_summary():
    x = torch.empty(3 * MIB, dtype=torch.uint8, device="neuron")
    text = N.memory_summary()
    assert isinstance(text, str)
    assert "neuron:0" in text
    for row in ("Allocated memory", "Device reserved memory", "Allocations", "OOMs"):
        assert row in text, row
    assert "KiB" in text  # CUDA's units: KiB up to 768 MiB
    assert N.memory_summary(abbreviated=True).count("\n") < text.count("\n")
    del x


def test_stats_per_device(two_devices):
    before0, before1 = N.memory_allocated(0), N.memory_allocated(1)
    x = torch.empty(1024, device="neuron:1")
    assert N.memory_allocated(1) - before1 == 4096
    assert N.memory_allocated(0) == before0
    del x
    assert N.memory_allocated(1) == before1


# --- out of memory ---------------------------------------------------------------------

OOM_SCRIPT = """
import json
import torch
N = torch.neuron
MIB = 1 << 20
r = {"capacity": N.get_device_properties(0).total_memory}
keep = torch.ones(16 * MIB, dtype=torch.uint8, device="neuron")
try:
    torch.empty(128 * MIB, dtype=torch.uint8, device="neuron")
    r["oom"] = None
except torch.OutOfMemoryError as e:
    r["oom"] = str(e)
    r["oom_is_runtime_error"] = isinstance(e, RuntimeError)
r["num_ooms"] = N.memory_stats()["num_ooms"]
r["keep_sum"] = keep.sum().item()  # the device still works
try:
    torch.zeros(128 * MIB, dtype=torch.uint8).to("neuron")
    r["oom_copy"] = None
except torch.OutOfMemoryError as e:
    r["oom_copy"] = str(e)
# Fill almost everything, free it, and allocate again.
big = torch.full((40 * MIB,), 3, dtype=torch.uint8, device="neuron")
r["big_sum"] = big.sum().item()
del keep, big
N.empty_cache()
r["reserved_after_empty"] = N.memory_reserved()
again = torch.ones(56 * MIB, dtype=torch.uint8, device="neuron")
r["again_sum"] = again.sum().item()
del again
# Without empty_cache: when the device is full, the allocator gives its
# cached segments back and retries by itself.
a = torch.ones(48 * MIB, dtype=torch.uint8, device="neuron")
N.synchronize()
del a
b = torch.ones(56 * MIB, dtype=torch.uint8, device="neuron")
r["retry_sum"] = b.sum().item()
r["retries"] = N.memory_stats()["num_alloc_retries"]
print(json.dumps(r))
"""


def test_out_of_memory(run_py, check):
    out = check(run_py(OOM_SCRIPT, env={"TORCH_NEURONX_HBM_BYTES_PER_CORE": "64MiB"}))
    r = json.loads(out.splitlines()[-1])
    assert r["capacity"] == 64 * MIB
    msg = r["oom"]
    assert msg is not None, "allocating 128 MiB of a 64 MiB device succeeded"
    assert r["oom_is_runtime_error"]
    assert "neuron:0" in msg  # the device
    assert "128.00 MiB" in msg  # the request
    assert "16.00 MiB" in msg  # what is in use
    assert "64.00 MiB" in msg  # the capacity
    assert "empty_cache" in msg  # what to do
    assert r["num_ooms"] >= 1
    assert r["keep_sum"] == 16 * MIB
    assert r["oom_copy"] is not None and "neuron:0" in r["oom_copy"]
    assert r["big_sum"] == 120 * MIB
    assert r["reserved_after_empty"] == 0
    assert r["again_sum"] == 56 * MIB
    assert r["retry_sum"] == 56 * MIB
    assert r["retries"] >= 1


# --- the caching allocator ---------------------------------------------------------------


def test_freed_block_is_reused_on_same_stream():
    x = torch.empty(5000, device="neuron")
    p = x.data_ptr()
    reserved = N.memory_reserved()
    del x
    y = torch.empty(5000, device="neuron")
    assert y.data_ptr() == p
    assert N.memory_reserved() == reserved  # no new device memory


def test_freed_block_is_not_handed_to_another_stream():
    # Blocks are cached per stream: memory freed by the default stream's work is
    # not given to an allocation made under another stream.
    x = torch.empty(5000, device="neuron")
    p = x.data_ptr()
    del x
    s = N.Stream()
    with N.stream(s):
        y = torch.empty(5000, device="neuron")
    assert y.data_ptr() != p
    z = torch.empty(5000, device="neuron")
    assert z.data_ptr() == p
    del y, z


def test_reuse_keeps_data_correct():
    # A reused block receives fresh contents (the op after the free is ordered
    # after the work that last used it).
    a = torch.randn(4096, device="neuron")
    expected = (a.cpu() * 3) + 1
    tmp = a * 3
    out = tmp + torch.ones(4096, device="neuron")
    del tmp
    c = torch.zeros(4096, device="neuron")
    torch.testing.assert_close(out.cpu(), expected)
    assert c.cpu().abs().sum().item() == 0


# A size no other allocation of these tests has: 6,400,000 bytes, carved from an
# 8 MiB segment of its own, so that the block found for the next request of the
# same size is that one if it is free, and its size stands out in the statistics
# (the busy work's blocks are 4 MiB).
_RS_NUMEL = 1_600_000
_RS_BYTES = _RS_NUMEL * 4


def _use_on_busy_side_stream(busy_fn):
    N.empty_cache()
    # add_'s first call with this signature is validated (the host waits for
    # it); the one on the side stream below must only be queued.
    torch.ones(4, device="neuron").add_(1)
    N.synchronize()
    side = N.Stream()
    t = torch.ones(_RS_NUMEL, device="neuron")
    side.wait_stream(N.current_stream())
    with N.stream(side):
        busy_fn(16)
        t.add_(1)  # t is used by the side stream's queue, behind the busy work
    return side, t


def test_record_stream_delays_reuse(busy_fn):
    side, t = _use_on_busy_side_stream(busy_fn)
    p = t.data_ptr()
    t.record_stream(side)
    del t
    u = torch.empty(_RS_NUMEL, device="neuron")
    assert not side.query(), "the side stream finished too early for the test"
    assert u.data_ptr() != p, "block reused while the side stream may still use it"
    side.synchronize()
    del u


def test_record_stream_frees_at_once_and_reuses_after_synchronize(busy_fn):
    side, t = _use_on_busy_side_stream(busy_fn)
    p = t.data_ptr()
    t.record_stream(side)
    before = N.memory_allocated()
    del t
    # As on CUDA: the block is freed now (allocated drops) but not reusable yet.
    assert before - N.memory_allocated() == _RS_BYTES
    assert not side.query(), "the side stream finished too early for the test"
    side.synchronize()
    v = torch.empty(_RS_NUMEL, device="neuron")
    assert v.data_ptr() == p, "block not reused after the side stream passed its use"
    del v


def test_freed_tensor_memory_returns_while_its_work_is_queued(busy_fn):
    busy_fn(12)
    before = N.memory_allocated()
    t = torch.ones(MIB, device="neuron")  # the fill waits behind the busy work
    p = t.data_ptr()
    del t
    u = torch.empty(MIB, device="neuron")
    # Same stream: later work is ordered after the fill, so the block is safe to reuse.
    assert u.data_ptr() == p
    assert N.memory_allocated() <= before + 4 * MIB
    del u


def test_record_stream_keeps_side_stream_result_correct(busy_fn):
    side = N.Stream()
    src = torch.arange(1000.0, device="neuron")
    side.wait_stream(N.current_stream())
    with N.stream(side):
        busy_fn(6)
        res = src * 2
    src.record_stream(side)
    del src
    scribble = torch.full((1000,), -1.0, device="neuron")  # must not land on src
    N.current_stream().wait_stream(side)
    torch.testing.assert_close(res.cpu(), torch.arange(1000.0) * 2)
    assert scribble.cpu().eq(-1).all()


RECORD_STREAM_FREE_SCRIPT = """
import time
import torch
N = torch.neuron
side = N.Stream()
with N.stream(side):
    # Queues an item on `side` that owns a device block (the storage's old memory).
    t = torch.ones(1 << 16, device="neuron")
    t.untyped_storage().resize_(0)
while not side.query():
    time.sleep(0.001)
# The finished item's block is released when `side` next takes work: here, from
# inside the allocator's free of `u`, which records its reuse event on `side`.
u = torch.ones(1 << 16, device="neuron")
u.record_stream(side)
del u
N.synchronize()
print("ok")
"""


def test_free_with_record_stream_while_the_stream_holds_finished_work(run_py, check):
    # Used to deadlock: the allocator queued the event while holding its own lock.
    out = check(run_py(RECORD_STREAM_FREE_SCRIPT, timeout=60))
    assert out.splitlines()[-1] == "ok"
