"""Neuron graphs: work captured once, replayed as one work item (CUDA graphs' analogue).

``torch.neuron.NeuronGraph`` and the ``torch.neuron.graph`` context manager work as
``torch.cuda.CUDAGraph`` and ``torch.cuda.graph`` do: the work queued on the capturing
stream (compiled programs, eager ops) is recorded instead of run, and each
``replay()`` runs all of it again over the same device memory with no host work per
op. The memory allocated while capturing belongs to the graph until ``reset()`` (or
until the graph is deleted). As with CUDA graphs: fill the captured inputs in place
before replaying, read the outputs before the next replay (it overwrites them); host
waits (``.item()``, ``.cpu()``, ``synchronize()``), random ops and CPU tensors read by
compiled kernels are errors while capturing, and make the capture fail.
"""

from __future__ import annotations

import gc
from typing import Any

import torch

from .. import _C
from .device import current_device, synchronize
from .memory import empty_cache
from .streams import Stream, current_stream

__all__ = ["NeuronGraph", "graph", "is_current_stream_capturing"]


def is_current_stream_capturing() -> bool:
    """True if the current stream of the current device is capturing a graph."""
    return _C._is_current_stream_capturing(current_device())


class NeuronGraph:
    """Captured device work (see the module docstring)."""

    def __init__(self) -> None:
        self._graph = _C._NeuronGraph()

    def capture_begin(self, pool: Any = None) -> None:
        """Starts capturing the current stream. ``pool`` is accepted for
        ``torch.cuda.CUDAGraph`` compatibility; each graph has its own memory."""
        self._graph.capture_begin()

    def capture_end(self) -> None:
        self._graph.capture_end()

    def replay(self) -> None:
        """Queues the captured work on the current stream, as one work item."""
        self._graph.replay()

    def reset(self) -> None:
        """Drops the captured work and frees the graph's memory."""
        self._graph.reset()

    def pool(self) -> tuple[int, int]:
        return (0, self._graph.id)

    @property
    def num_steps(self) -> int:
        """How many work items one replay runs."""
        return self._graph.num_steps

    def steps(self) -> list[dict]:
        """What each captured step computes: ``label``; for an eager op, ``op`` (its
        schema name), ``operands`` (the tensors it works on, in the order the eager
        path records them: ``kind`` "device", "host_scalar" or "undefined"; for a
        device tensor ``data_ptr`` and ``storage_nbytes`` of its storage,
        ``storage_offset``, ``sizes``, ``strides``, ``dtype``; ``written``: whether
        the op writes it) and ``arguments`` (its arguments in schema order, a
        functional op's results after them, tensors as meta tensors). Other steps
        (copies, collectives, NKI kernels) have ``op`` None. This is what adaptive
        eager's fusion reads from its work items."""
        return self._graph.steps()

    def __repr__(self) -> str:
        state = f"{self.num_steps} steps" if self._graph.captured else "not captured"
        return f"NeuronGraph({state})"


class graph:
    """``with torch.neuron.graph(g): ...`` captures the block's device work into ``g``.

    As ``torch.cuda.graph``: the device is synchronised and unused cached memory is
    freed first, and the capture runs on a side stream (``stream``, else a new one)
    that waits for the current stream, so that replays can go on any stream.
    """

    def __init__(
        self,
        neuron_graph: NeuronGraph,
        pool: Any = None,
        stream: Stream | None = None,
        capture_error_mode: str = "global",
    ) -> None:
        self.neuron_graph = neuron_graph
        self.pool = pool
        self.capture_stream = stream if stream is not None else Stream()
        self._stream_ctx = torch.neuron.stream(self.capture_stream)

    def __enter__(self) -> None:
        synchronize()
        gc.collect()
        empty_cache()
        self.capture_stream.wait_stream(current_stream())
        self._stream_ctx.__enter__()
        self.neuron_graph.capture_begin(self.pool)

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.neuron_graph.capture_end()
        except Exception:
            if exc_type is None:
                raise  # the capture's own error; else the block's error wins
        finally:
            self._stream_ctx.__exit__(exc_type, exc, tb)
            if exc_type is not None:
                # The block failed part-way: what was captured is not the block.
                self.neuron_graph.reset()
