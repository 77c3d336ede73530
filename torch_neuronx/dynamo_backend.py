"""Entry point of ``torch.compile(backend="neuron")`` (the ``torch_dynamo_backends``
entry point names it, so ``"neuron" in torch._dynamo.list_backends()`` without
importing torch_neuronx first). The backend lives in ``torch_neuronx/compile/``."""

from __future__ import annotations


def neuron_backend(gm, example_inputs, **kwargs):
    from .compile.backend import neuron_backend as backend

    return backend(gm, example_inputs, **kwargs)
