"""What ``torch.neuron.get_dynamo_metrics()`` reports: one record per graph the
``neuron`` backend compiled, and ``torch._dynamo.utils.counters["neuron"]``."""

from __future__ import annotations

import itertools
import threading
from dataclasses import asdict, dataclass, field

import torch

_lock = threading.Lock()
_ids = itertools.count()
_graphs: list[GraphRecord] = []


@dataclass
class GraphRecord:
    graph_id: int
    name: str
    model_name: str | None
    node_count: int
    has_collectives: bool
    compile_seconds: float = 0.0
    fell_back: bool = False
    phases: dict[str, float] = field(default_factory=dict)


def _has_collectives(gm: torch.fx.GraphModule) -> bool:
    for node in gm.graph.nodes:
        if node.op == "call_function":
            name = str(getattr(node.target, "__module__", "")) + str(node.target)
            if "c10d_functional" in name or "_functional_collectives" in name:
                return True
    return False


def start_graph(gm: torch.fx.GraphModule, model_name: str | None) -> GraphRecord:
    from torch._guards import CompileContext

    compile_id = CompileContext.current_compile_id()
    with _lock:
        graph_id = next(_ids)
    name = f"graph {compile_id}" if compile_id is not None else f"graph {graph_id}"
    return GraphRecord(
        graph_id=graph_id,
        name=name,
        model_name=model_name,
        node_count=sum(1 for _ in gm.graph.nodes),
        has_collectives=_has_collectives(gm),
    )


def finish_graph(record: GraphRecord, seconds: float, fell_back: bool) -> None:
    from torch._dynamo.utils import counters

    record.compile_seconds = seconds
    record.fell_back = fell_back
    with _lock:
        _graphs.append(record)
    counters["neuron"]["compiled_graphs" if not fell_back else "eager_fallbacks"] += 1


def get_dynamo_metrics() -> list[dict]:
    """One dict per graph the ``neuron`` compile backend handled, oldest first."""
    with _lock:
        return [asdict(g) for g in _graphs]


def reset_dynamo_metrics() -> None:
    with _lock:
        _graphs.clear()
