"""The library's own parallel regions (adaptive eager's fused pass) split their work
over the host's threads as ATen's kernels do.

The library is built without OpenMP, where ATen's header-only at::parallel_for
runs everything on the calling thread; csrc/core/openmp_runtime.h reaches torch's
OpenMP runtime instead. These tests pin the chunks: the same rule as ATen's, each
chunk on its own thread.

They run in a fresh process: the thread count is process-wide state that other
code legitimately changes (a DataLoader's pin-memory thread sets it to 1 for the
whole process, as it does on CUDA), and setting it here would change it for the
tests after these."""

import json
import math

import pytest

# Chunks of [0, n) with grain 32768: on the main thread with torch's default
# threads, on a new thread, and after torch.set_num_threads(1).
CHUNKS_SRC = """
import json, threading
import torch
import torch_neuronx

chunks = torch_neuronx._C._parallel_chunks
sizes = [0, 1, 32768, 65537, 100_000, 3 * 32768 + 1, 12_500_000]
out = {"threads": torch.get_num_threads(), "main": [chunks(n, 32768) for n in sizes]}
out["tiny_grain"] = chunks(1, 0)
seen = []
t = threading.Thread(target=lambda: seen.append(chunks(100_000, 32768)))
t.start()
t.join(timeout=60)
out["new_thread"] = seen
torch.set_num_threads(1)
out["one_thread"] = chunks(1_000_000, 32768)
print(json.dumps({"sizes": sizes, **out}))
"""


def aten_chunks(n: int, grain: int, threads: int) -> list[list[int]]:
    """ATen's at::parallel_for(0, n, grain) with `threads` OpenMP threads."""
    if n == 0:
        return []
    if threads <= 1 or n <= grain:
        return [[0, 0, n]]
    count = min(threads, math.ceil(n / grain))
    size = math.ceil(n / count)
    return [[i, i * size, min(n, (i + 1) * size)] for i in range(count) if i * size < n]


@pytest.fixture(scope="module")
def chunks(run_py, check) -> dict:
    return json.loads(check(run_py(CHUNKS_SRC, timeout=120)))


def test_chunks_follow_atens_rule_one_per_thread(chunks):
    threads = chunks["threads"]
    if threads < 2:
        pytest.skip("one host thread")
    for n, got in zip(chunks["sizes"], chunks["main"], strict=True):
        assert got == aten_chunks(n, 32768, threads), n
    # Above the grain, each chunk on a thread of its own.
    big = chunks["main"][-1]
    assert len({t for t, _, _ in big}) == len(big) == threads


def test_small_ranges_and_one_thread_run_on_the_calling_thread(chunks):
    assert chunks["main"][chunks["sizes"].index(32768)] == [[0, 0, 32768]]
    assert chunks["main"][0] == []
    assert chunks["tiny_grain"] == [[0, 0, 1]]
    assert chunks["one_thread"] == [[0, 0, 1_000_000]]


def test_any_thread_gets_the_same_chunks(chunks):
    # A stream worker is a thread of its own; so is this one.
    i = chunks["sizes"].index(100_000)
    assert chunks["new_thread"] == [chunks["main"][i]]
