"""The library's own parallel regions (adaptive eager's fused pass) split their work
over the host's threads as ATen's kernels do.

The library is built without OpenMP, where ATen's header-only at::parallel_for
runs everything on the calling thread; csrc/core/openmp_runtime.h reaches torch's
OpenMP runtime instead. These tests pin the chunks: the same rule as ATen's, each
chunk on its own thread."""

import math
import threading

import pytest
import torch

import torch_neuronx

chunks_of = torch_neuronx._C._parallel_chunks


def aten_chunks(n: int, grain: int, threads: int) -> list[tuple[int, int, int]]:
    """ATen's at::parallel_for(0, n, grain) with `threads` OpenMP threads."""
    if threads <= 1 or n <= grain:
        return [(0, 0, n)]
    count = min(threads, math.ceil(n / grain))
    size = math.ceil(n / count)
    return [(i, i * size, min(n, (i + 1) * size)) for i in range(count) if i * size < n]


@pytest.mark.parametrize("n", [65537, 100_000, 12_500_000, 3 * 32768 + 1])
def test_chunks_follow_atens_rule_one_per_thread(n):
    threads = torch.get_num_threads()
    if threads < 2:
        pytest.skip("one host thread")
    got = chunks_of(n, 32768)
    assert got == aten_chunks(n, 32768, threads)
    assert len({t for t, _, _ in got}) == len(got) > 1  # each on its own thread


def test_small_ranges_and_one_thread_run_on_the_calling_thread():
    assert chunks_of(32768, 32768) == [(0, 0, 32768)]  # not above the grain
    assert chunks_of(1, 0) == [(0, 0, 1)]
    assert chunks_of(0, 1) == []
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert chunks_of(1_000_000, 32768) == [(0, 0, 1_000_000)]
    finally:
        torch.set_num_threads(n)


def test_any_thread_gets_the_same_chunks():
    # A stream worker is a thread of its own; so is this one.
    seen = []
    t = threading.Thread(target=lambda: seen.append(chunks_of(100_000, 32768)))
    t.start()
    t.join(timeout=60)
    assert not t.is_alive()
    assert seen == [chunks_of(100_000, 32768)]
