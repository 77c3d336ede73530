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
- outputs are the graph's own buffers (no copy; a backward graph reads the forward's
  activations in place), and a replay never overwrites one the caller still holds:
  while any is alive (a tensor kept across steps, activations whose backward has
  not run yet), calls run uncaptured, with one warning (CUDA graph trees raise
  instead); inputs the graph mutates are copied back;
- one capture per set of input shapes (dynamic shapes), up to ``MAX_CAPTURES``;
- a graph that cannot be captured (random ops, CPU tensors read by its kernels,
  host waits) runs as it did before, after one warning naming the reason.

It imports Inductor: ``backend.py`` imports it when a graph is compiled so.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._inductor.compile_fx import compile_fx_inner
from torch._inductor.utils import output_node

from ..neuron.graphs import NeuronGraph, graph

MAX_CAPTURES = 8


def _is_neuron_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "neuron"


# The outputs of live captures, by address: a later capture whose input is one of
# them (the backward reading the forward's activations) reads it in place, so that
# its replays need no copy; the count is how many captures hold it so.
_static_outputs: weakref.WeakValueDictionary[int, _Capture] = weakref.WeakValueDictionary()
_held_as_input: dict[int, int] = {}


def _release_inputs(ptrs: list[int]) -> None:
    for p in ptrs:
        n = _held_as_input.get(p, 0) - 1
        if n > 0:
            _held_as_input[p] = n
        else:
            _held_as_input.pop(p, None)


class _Capture:
    """One captured call: its graph and the buffers it reads and writes."""

    def __init__(
        self,
        call: Callable,
        args: list,
        static_idxs: frozenset[int],
        copied_out: frozenset[int],
    ) -> None:
        self.inputs = []
        self.borrowed = []  # inputs that are another capture's outputs
        held = []
        for i, a in enumerate(args):
            if _is_neuron_tensor(a) and a.data_ptr() in _static_outputs:
                self.inputs.append(a.detach())  # read in place
                self.borrowed.append(i)
                held.append(a.data_ptr())
            elif i in static_idxs or not _is_neuron_tensor(a):
                self.inputs.append(a)  # parameters, buffers: their address stays
            else:
                self.inputs.append(a.clone())
        for p in held:
            _held_as_input[p] = _held_as_input.get(p, 0) + 1
        weakref.finalize(self, _release_inputs, held)
        self.tensor_inputs: list | None = None  # (index, buffer, address), on first run
        self.graph = NeuronGraph()
        with graph(self.graph):
            self.outputs = call(list(self.inputs))
        # The outputs returned as the graph's own buffers, watched for holders:
        # (storage handle, address, references when only the capture holds it).
        # The counts are read once every handle is held (outputs may share one).
        returned = []
        for i, o in enumerate(self.outputs):
            if isinstance(o, torch.Tensor):
                _static_outputs[o.data_ptr()] = self
                if i not in copied_out:
                    returned.append((o.untyped_storage(), o.data_ptr()))
        self.watched = [(st, ptr, torch._C._storage_Use_Count(st._cdata)) for st, ptr in returned]

    def in_use(self) -> bool:
        """Does anyone but the captures still hold a buffer the graph returned
        (an output not copied out)? Replaying would overwrite it."""
        use_count = torch._C._storage_Use_Count
        return any(
            use_count(st._cdata) > base + _held_as_input.get(ptr, 0)
            for st, ptr, base in self.watched
        )

    def replayable_with(self, args: list) -> bool:
        """A borrowed input must come from its capture: copying another tensor
        into it would overwrite that capture's output, which a backward may
        still need."""
        return all(args[i].data_ptr() == self.inputs[i].data_ptr() for i in self.borrowed)

    def run(self, args: list, mutated: Sequence[int], copied_out: frozenset[int]) -> Any:
        # Per call: kept to a few list walks (this is the host work left).
        if self.tensor_inputs is None:
            self.tensor_inputs = [
                (i, s, s.data_ptr()) for i, s in enumerate(self.inputs) if _is_neuron_tensor(s)
            ]
        copied = []
        for i, s, ptr in self.tensor_inputs:
            if args[i].data_ptr() != ptr:
                s.copy_(args[i])
                copied.append(i)
        self.graph.replay()
        if copied:
            for i in mutated:
                if i in copied:
                    args[i].copy_(self.inputs[i])
        # The user-visible outputs are copied out; the rest (activations for the
        # backward, gradients) are aliases of the graph's buffers: while anyone
        # holds one, the capture is in use and calls run uncaptured.
        return type(self.outputs)(
            (o.clone() if i in copied_out else o.detach()) if isinstance(o, torch.Tensor) else o
            for i, o in enumerate(self.outputs)
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
        user_visible: Sequence[int],
    ) -> None:
        self.call = call
        self.name = name
        self.static_idxs = frozenset(static_idxs)
        self.mutated_idxs = tuple(mutated_idxs)
        self.user_visible = frozenset(user_visible)  # outputs the caller sees: copied
        self.captures: dict[tuple, _Capture] = {}
        self.key_idxs: list[int] | None = None
        self.warmed_up: set[tuple] = set()
        self.disabled: str | None = None
        self.replays = 0  # calls that ran a captured graph
        self.uncaptured_calls = 0  # calls run uncaptured: the capture was in use
        CapturedCall.instances.add(self)

    def _key(self, args: list) -> tuple:
        # Per call, so kept cheap: parameters and buffers (static inputs) keep
        # their shapes, and devices are guarded by Dynamo already.
        if self.key_idxs is None:
            self.key_idxs = [i for i in range(len(args)) if i not in self.static_idxs]
        return tuple(
            (a.shape, a.stride(), a.dtype) if isinstance(a, torch.Tensor) else a
            for a in (args[i] for i in self.key_idxs)
        )

    def _why_not(self, args: list) -> str | None:
        if any(isinstance(a, torch.Tensor) and a.device.type != "neuron" for a in args):
            return "it has a CPU tensor input"
        if not any(_is_neuron_tensor(a) for a in args):
            return "it has no neuron tensor input"
        return None

    def _note_in_use(self) -> None:
        self.uncaptured_calls += 1
        if self.uncaptured_calls == 1:
            warnings.warn(
                f"neuron: {self.name}: outputs of its last replay are still in use, so "
                "this call runs uncaptured (a replay would overwrite them); with "
                "mode='reduce-overhead', keep results as Python numbers (.item()) or "
                "clones across steps",
                stacklevel=3,
            )

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
            if captured.in_use():
                self._note_in_use()
                return self.call(args)
            if not captured.replayable_with(args):
                self.uncaptured_calls += 1
                return self.call(args)
            self.replays += 1
            return captured.run(args, self.mutated_idxs, self.user_visible)
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
            captured = _Capture(self.call, args, self.static_idxs, self.user_visible)
        except Exception as e:  # noqa: BLE001 - any capture error: run uncaptured
            self._disable(str(e).splitlines()[0] if str(e) else type(e).__name__)
            return self.call(args)
        self.captures[key] = captured
        self.replays += 1
        return captured.run(args, self.mutated_idxs, self.user_visible)


def capturing_inner_compile(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """Inductor's ``compile_fx_inner``, its compiled graph then replayed from a capture."""
    compiled = compile_fx_inner(gm, example_inputs, **kwargs)
    call = getattr(compiled, "current_callable", None)
    if call is None:
        return compiled
    phase = "backward" if kwargs.get("is_backward") else "forward"
    # Inductor marks which outputs the model returns (the rest: activations saved
    # for the backward, gradients); with no marks, all of them.
    outputs = output_node(gm)
    n_out = len(outputs.args[0]) if isinstance(outputs.args[0], (tuple, list)) else 1
    visible = outputs.meta.get("user_visible_output_idxs")
    if kwargs.get("is_backward"):
        # Gradients stay in the graph's buffers: AccumulateGrad takes them as
        # .grad, a compiled optimizer step then reads them in place, and
        # zero_grad() (set_to_none) lets the next backward replay.
        visible = ()
    elif visible is None or not visible:
        visible = range(n_out)
    compiled.current_callable = CapturedCall(
        call,
        f"compiled graph {kwargs.get('graph_id')} {phase}",
        kwargs.get("static_input_idxs") or (),
        getattr(compiled, "mutated_input_idxs", ()) or (),
        visible,
    )
    return compiled
