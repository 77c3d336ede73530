"""The device trace as tests read it: which work items some code queued."""

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
