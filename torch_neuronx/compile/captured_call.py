"""``mode="reduce-overhead"``: each compiled graph (forward and backward alike) is
captured into a ``torch.neuron.NeuronGraph`` and later calls replay it.

Inductor's own reduce-overhead (CUDA graph trees) is CUDA-only; this is the same
idea on neuron, applied to each graph Inductor compiles (``inner_compile``):

- the first call of a graph runs as usual (warm-up); the second is captured: its
  tensor inputs are copied into buffers the graph owns (parameters, whose address
  does not change, are used in place), the wrapper runs once under capture, and
  from then on a call is: copy the inputs whose address differs from the captured
  one, replay (one work item, no Python wrapper, no host work per op), copy the
  outputs out;
- outputs are copies, so, unlike CUDA graph trees, a later replay never overwrites
  a tensor the caller holds; inputs the graph mutates are copied back;
- one capture per set of input shapes (dynamic shapes), up to ``MAX_CAPTURES``;
- a graph that cannot be captured (random ops, CPU tensors read by its kernels,
  host waits) runs as it did before, after one warning naming the reason.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..graphs import NeuronGraph, graph

MAX_CAPTURES = 8


def _is_neuron_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "neuron"


class _Capture:
    """One captured call: its graph and the buffers it reads and writes."""

    def __init__(self, call: Callable, args: list, static_idxs: frozenset[int]) -> None:
        self.inputs = [
            a if (i in static_idxs or not _is_neuron_tensor(a)) else a.clone()
            for i, a in enumerate(args)
        ]
        self.graph = NeuronGraph()
        with graph(self.graph):
            self.outputs = call(list(self.inputs))

    def run(self, args: list, mutated: Sequence[int]) -> Any:
        copied = []
        for i, (a, s) in enumerate(zip(args, self.inputs, strict=True)):
            if _is_neuron_tensor(a) and a.data_ptr() != s.data_ptr():
                s.copy_(a)
                copied.append(i)
        self.graph.replay()
        for i in mutated:
            if i in copied:
                args[i].copy_(self.inputs[i])
        return type(self.outputs)(
            o.clone() if isinstance(o, torch.Tensor) else o for o in self.outputs
        )


class CapturedCall:
    """The ``current_callable`` of a compiled graph under reduce-overhead."""

    instances: weakref.WeakSet[CapturedCall] = weakref.WeakSet()  # live ones

    def __init__(
        self,
        call: Callable,
        name: str,
        static_idxs: Sequence[int],
        mutated_idxs: Sequence[int],
    ) -> None:
        self.call = call
        self.name = name
        self.static_idxs = frozenset(static_idxs)
        self.mutated_idxs = tuple(mutated_idxs)
        self.captures: dict[tuple, _Capture] = {}
        self.warmed_up: set[tuple] = set()
        self.disabled: str | None = None
        self.replays = 0  # calls that ran a captured graph
        CapturedCall.instances.add(self)

    @staticmethod
    def _key(args: list) -> tuple:
        return tuple(
            (tuple(a.shape), tuple(a.stride()), a.dtype, a.device)
            if isinstance(a, torch.Tensor)
            else a
            for a in args
        )

    def _why_not(self, args: list) -> str | None:
        if any(isinstance(a, torch.Tensor) and a.device.type != "neuron" for a in args):
            return "it has a CPU tensor input"
        if not any(_is_neuron_tensor(a) for a in args):
            return "it has no neuron tensor input"
        return None

    def _disable(self, reason: str) -> None:
        self.disabled = reason
        warnings.warn(
            f"neuron: {self.name} is not captured for mode='reduce-overhead' ({reason}); "
            "it runs as a device program at each call",
            stacklevel=3,
        )

    def __call__(self, inputs: list) -> Any:
        args = list(inputs)
        inputs.clear()  # the boxed convention: the caller's list is consumed
        if self.disabled is not None:
            return self.call(args)
        key = self._key(args)
        captured = self.captures.get(key)
        if captured is not None:
            self.replays += 1
            return captured.run(args, self.mutated_idxs)
        if key not in self.warmed_up:
            self.warmed_up.add(key)
            return self.call(args)
        reason = self._why_not(args)
        if reason is None and len(self.captures) >= MAX_CAPTURES:
            return self.call(args)  # too many shapes: the rest run uncaptured
        if reason is not None:
            self._disable(reason)
            return self.call(args)
        try:
            captured = _Capture(self.call, args, self.static_idxs)
        except Exception as e:  # noqa: BLE001 - any capture error: run uncaptured
            self._disable(str(e).splitlines()[0] if str(e) else type(e).__name__)
            return self.call(args)
        self.captures[key] = captured
        self.replays += 1
        return captured.run(args, self.mutated_idxs)


def capturing_inner_compile(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """Inductor's ``compile_fx_inner``, its compiled graph then replayed from a capture."""
    from torch._inductor.compile_fx import compile_fx_inner

    compiled = compile_fx_inner(gm, example_inputs, **kwargs)
    call = getattr(compiled, "current_callable", None)
    if call is None:
        return compiled
    phase = "backward" if kwargs.get("is_backward") else "forward"
    compiled.current_callable = CapturedCall(
        call,
        f"compiled graph {kwargs.get('graph_id')} {phase}",
        kwargs.get("static_input_idxs") or (),
        getattr(compiled, "mutated_input_idxs", ()) or (),
    )
    return compiled
