"""``torch.compile(backend="neuron")``: TorchNeuron's module of that name.

The ``torch_dynamo_backends`` entry point names ``neuron_backend`` here, so
``"neuron" in torch._dynamo.list_backends()`` without importing torch_neuronx
first. The backend lives in ``torch_neuronx/compile/`` (importing it does not
import Inductor).
"""

from __future__ import annotations

from .compile.backend import (
    NEFFCompilationError,
    NEFFExecutionError,
    create_neuron_backend,
    get_model_name,
    neuron_backend,
    set_model_name,
)
from .neuron.compilation_metrics import (
    NeuronCompilationMetrics,
    get_dynamo_metrics,
    reset_dynamo_metrics,
)

__all__ = [
    "NEFFCompilationError",
    "NEFFExecutionError",
    "NeuronCompilationMetrics",
    "create_neuron_backend",
    "get_dynamo_metrics",
    "get_model_name",
    "neuron_backend",
    "reset_dynamo_metrics",
    "set_model_name",
]
