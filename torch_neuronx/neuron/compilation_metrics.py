"""What ``torch.neuron.get_dynamo_metrics()`` reports: one record per graph the
``neuron`` compile backend handled, with TorchNeuron's ``NeuronCompilationMetrics``
fields.

The records belong to the device module; ``torch_neuronx/compile/metrics.py``
times each graph the backend compiles and adds its record here (the compile
package imports this one, not the reverse).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

__all__ = ["NeuronCompilationMetrics", "get_dynamo_metrics", "reset_dynamo_metrics"]

_lock = threading.Lock()
_graphs: list[NeuronCompilationMetrics] = []


@dataclass
class NeuronCompilationMetrics:
    graph_id: int
    graph_name: str
    model_name: str | None
    has_collectives: bool
    graph_node_count: int
    timestamp: float
    torch_neuronx_fx_passes_us: int = 0
    torch_neuronx_lower_us: int = 0
    torch_neuronx_compile_us: int = 0
    compile_seconds: float = 0.0  # the whole backend call, wall clock
    fell_back: bool = False  # ran eagerly: the graph could not be compiled


def add(record: NeuronCompilationMetrics) -> None:
    """Adds the record of a graph the backend has handled."""
    with _lock:
        _graphs.append(record)


def get_dynamo_metrics() -> list[NeuronCompilationMetrics]:
    """One record per graph the ``neuron`` compile backend handled, oldest first."""
    with _lock:
        return list(_graphs)


def reset_dynamo_metrics() -> None:
    with _lock:
        _graphs.clear()
