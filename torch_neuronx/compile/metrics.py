"""Times each graph the ``neuron`` backend compiles, for
``torch.neuron.get_dynamo_metrics()`` (the records: ``neuron/compilation_metrics.py``)
and ``torch._dynamo.utils.counters["neuron"]``.

The phase times come from Inductor's own timers
(``torch._dynamo.utils.compilation_time_metrics``), read before and after the
graph is compiled: FX passes (AOTAutograd and Inductor's graph passes), lowering
(Inductor's ``GraphLowering.run``) and compiling (code generation, the C++
compiler, loading).
"""

from __future__ import annotations

import itertools
import re
import threading
import time

import torch
from torch._guards import CompileContext

from ..neuron import compilation_metrics
from ..neuron.compilation_metrics import NeuronCompilationMetrics

_lock = threading.Lock()
_ids = itertools.count()

# Inductor's timers (compilation_time_metrics keys) of the phases. Compiling
# is code generation, the C++ compiler and loading (compile_to_module), or only
# loading when the graph came from the cache. FX passes are the rest of the
# backend call: AOTAutograd, the graph passes, cache lookups.
_LOWER = "GraphLowering.run"
_COMPILE = "GraphLowering.compile_to_module"
_LOAD_CACHED = "PyCodeCache.load_by_key_path"


def _has_collectives(gm: torch.fx.GraphModule) -> bool:
    for node in gm.graph.nodes:
        if node.op == "call_function":
            name = str(getattr(node.target, "__module__", "")) + str(node.target)
            if "c10d_functional" in name or "_functional_collectives" in name:
                return True
    return False


def _timers() -> dict[str, float]:
    # lazy: Dynamo costs seconds, and importing the backend (which imports this
    # module) imports neither Dynamo nor Inductor (backend.py)
    from torch._dynamo.utils import compilation_time_metrics

    return {k: sum(v) for k, v in compilation_time_metrics.items()}


class GraphTimer:
    """Times one backend call of one graph."""

    def __init__(self, gm: torch.fx.GraphModule, model_name: str | None) -> None:
        with _lock:
            graph_id = next(_ids)
        compile_id = CompileContext.current_compile_id()
        # TorchNeuron's form "{model}_{frame}_graph_{n}": the Dynamo frame
        # and which compile of it this is (a recompile, a graph break's rest).
        frame = compile_id.frame_id if compile_id is not None else graph_id
        attempt = compile_id.frame_compile_id if compile_id is not None else 0
        self.record = NeuronCompilationMetrics(
            graph_id=graph_id,
            graph_name=f"{_name_part(model_name or 'model')}_{frame}_graph_{attempt}",
            model_name=model_name,
            has_collectives=_has_collectives(gm),
            graph_node_count=sum(1 for _ in gm.graph.nodes),
            timestamp=time.time(),
        )
        self._before = _timers()
        self._start = time.perf_counter()

    def finish(self, fell_back: bool) -> NeuronCompilationMetrics:
        from torch._dynamo.utils import counters  # lazy: Dynamo (see _timers)

        r = self.record
        r.compile_seconds = time.perf_counter() - self._start
        r.fell_back = fell_back
        spent = {k: v - self._before.get(k, 0.0) for k, v in _timers().items()}

        lower = spent.get(_LOWER, 0.0)
        compiled = spent.get(_COMPILE, 0.0) or spent.get(_LOAD_CACHED, 0.0)
        r.torch_neuronx_lower_us = int(lower * 1e6)
        r.torch_neuronx_compile_us = int(compiled * 1e6)
        r.torch_neuronx_fx_passes_us = int(max(r.compile_seconds - lower - compiled, 0.0) * 1e6)
        compilation_metrics.add(r)
        counters["neuron"]["compiled_graphs" if not fell_back else "eager_fallbacks"] += 1
        if r.has_collectives:
            counters["neuron"]["graphs_with_collectives"] += 1
        return r


def _name_part(name: str) -> str:
    return re.sub(r"\W", "_", name)
