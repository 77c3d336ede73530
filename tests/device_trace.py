"""The device trace as tests read it: which work items some code queued."""

import pytest
import torch

import torch_neuronx


def trace_labels(fn):
    """The labels of the work items `fn` queues (after a sync), in order."""
    torch.neuron.synchronize()
    torch_neuronx._C._trace_enable(True)
    try:
        torch_neuronx._C._trace_drain()
        fn()
        torch.neuron.synchronize()
        return [r["label"] for r in torch_neuronx._C._trace_drain()]
    finally:
        torch_neuronx._C._trace_enable(False)


def assert_one_pipeline(item, steps):
    """`item` (a profiler device item) is estimated as one pipeline of `steps`
    (neuron_rt::programEstimate): their compute and DMA summed and overlapped as far
    as the shorter, one launch and one DMA start. Returns (compute, dma, target)."""
    t = torch_neuronx._C._profiler_target()
    compute = sum(s["estimate_compute_ns"] for s in steps)
    dma = sum(s["estimate_dma_ns"] for s in steps)
    assert item["estimate_compute_ns"] == pytest.approx(compute)
    assert item["estimate_dma_ns"] == pytest.approx(dma)
    assert item["estimate_overlap_ns"] == pytest.approx(min(compute, dma))
    assert item["estimate_latency_ns"] == t["launch_ns"] + t["dma_start_ns"]
    return compute, dma, t
