"""Activation checkpointing policies the planner applies to a model's decoder
layers, named as TorchTitan's ``[activation_checkpoint]`` section names them:

- ``"none"``: nothing recomputed;
- ``"full"``: every layer recomputed in backward;
- ``"op"`` (selective, per op): inside every layer the outputs of the costly
  ops (matmuls, attention, TP's reduce-scatter, ``max``) are saved and the rest
  recomputed — except every second matmul, which is recomputed too, so the
  saved activations halve;
- an integer *k* (selective, per layer): every *k*-th layer (the k-th, 2k-th,
  ...) recomputed whole, the others not.

These are the semantics of TorchTitan's ``op`` / layer SAC (its
``activation_checkpoint.py``); the planner applies them through
``torch.utils.checkpoint``'s selective contexts, so the recomputed items are the
ones a real run's backward issues.
"""

from __future__ import annotations

import collections
import functools

import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

POLICIES = ("none", "full", "op")


def _op(path: str):
    """An op overload by dotted path, or None where this torch lacks it."""
    obj = torch.ops
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


# The ops whose outputs op-SAC saves (TorchTitan's save list for its dense
# models, the attention kernels any backend may pick included).
_SAVED_OP_PATHS = (
    "aten.mm.default",
    "aten._scaled_dot_product_efficient_attention.default",
    "aten._scaled_dot_product_flash_attention.default",
    "aten._scaled_dot_product_cudnn_attention.default",
    "aten._scaled_dot_product_attention_math.default",
    "aten._scaled_dot_product_fused_attention_overrideable.default",
    # neuron's attention op by default (docs/nki.md: the CPU's fused kernel as
    # one device op), so a planned run saves it as TorchTitan saves CUDA's.
    "aten._scaled_dot_product_flash_attention_for_cpu.default",
    "_c10d_functional.reduce_scatter_tensor.default",
    "aten.max.default",
)


@functools.cache
def saved_ops() -> frozenset:
    return frozenset(op for op in map(_op, _SAVED_OP_PATHS) if op is not None)


def parse(policy) -> str | int:
    """A policy from what a user or a TorchTitan file gives: False/None/"none",
    True/"full", "op", or a layer frequency (int or digit string, >= 1)."""
    if policy is None or policy is False:
        return "none"
    if policy is True:
        return "full"
    if isinstance(policy, int):
        if policy < 1:
            raise ValueError(f"a selective checkpointing frequency must be >= 1, not {policy}")
        return policy
    text = str(policy).strip().lower()
    if text.isdigit():
        return parse(int(text))
    if text in POLICIES:
        return text
    raise ValueError(
        f"unknown activation checkpointing policy {policy!r} "
        "(valid: none, full, op, or a layer frequency such as 2)"
    )


def describe(policy) -> str:
    p = parse(policy)
    if p == "none":
        return "none"
    if p == "full":
        return "full (every layer recomputed)"
    if p == "op":
        return "selective per op (matmul/attention outputs saved, every second matmul recomputed)"
    return f"selective per layer (every {p}th layer recomputed)" if p > 1 else "full"


def _op_policy_context():
    keep = saved_ops()
    mm = torch.ops.aten.mm.default
    counts = collections.Counter()  # matmuls seen, in forward and in recompute

    def policy(ctx, func, *args, **kwargs):
        if func == mm:
            key = "recompute" if ctx.is_recompute else "forward"
            counts[key] += 1
            # The second, fourth, ... matmul of the layer is recomputed: the
            # same choice in forward and in recompute keeps the two in step.
            if counts[key] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE if func in keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def wrap_layers(layers: list, policy) -> list:
    """The layers with ``policy`` applied (wrapped where they recompute); the
    caller puts them back in its module list."""
    p = parse(policy)
    if p == "none":
        return list(layers)
    out = []
    for i, layer in enumerate(layers):
        if p == "full" or (isinstance(p, int) and (i + 1) % p == 0):
            out.append(checkpoint_wrapper(layer, preserve_rng_state=False))
        elif p == "op":
            out.append(
                checkpoint_wrapper(layer, preserve_rng_state=False, context_fn=_op_policy_context)
            )
        else:
            out.append(layer)
    return out
