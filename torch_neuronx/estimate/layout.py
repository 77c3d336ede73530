"""A parallel layout (TP x FSDP x DP over N NeuronCores) applied for real in one
process: torch.distributed's fake process group (world size N, this process is
rank 0) carries the device mesh, and FSDP2's ``fully_shard`` and DTensor's tensor
parallel plans issue their collectives as they would on rank 0 of the real job;
the fake group answers them without moving anything, and the planning run's
dispatch mode sees and costs each one.

Mesh order: DP outermost, TP innermost, so a TP group is consecutive ranks —
the cores of one chip when TP divides the cores per chip, as the vendor's
best-practices guide lays out TP4 on trn2 (LNC=2: 4 logical cores per chip).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.optim.optimizer import _get_foreach_kernels_supported_devices
from torch.testing._internal.distributed.fake_pg import FakeStore

from . import checkpointing as ckpt

# DTensor, its tensor-parallel plans and FSDP2 cost ~1 s to import (a planning run
# needs them; `import torch_neuronx.estimate`, its CLI's --help and the validation
# table do not): the functions that use them import them.


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    fsdp: int = 1
    dp: int = 1

    @property
    def world(self) -> int:
        return self.tp * self.fsdp * self.dp

    def check(self, cfg=None, cores: int | None = None) -> None:
        """ValueError when the layout does not fit the job or the model."""
        for name in ("tp", "fsdp", "dp"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, not {v!r}")
        if cores is not None and cores != self.world:
            raise ValueError(
                f"tp x fsdp x dp = {self.tp} x {self.fsdp} x {self.dp} = {self.world} "
                f"does not equal the {cores} NeuronCores asked for"
            )
        if cfg is None or self.tp == 1:
            return
        heads = getattr(cfg, "num_attention_heads", None)
        kv = getattr(cfg, "num_key_value_heads", None) or heads
        inter = getattr(cfg, "intermediate_size", None)
        for what, n in (
            ("attention heads", heads),
            ("key/value heads", kv),
            ("MLP width (intermediate_size)", inter),
        ):
            if n is not None and n % self.tp:
                raise ValueError(f"tp={self.tp} does not divide the model's {n} {what}")

    def group_of(self, ranks: tuple) -> str:
        """Which dimension a group of global ranks spans (rank 0's groups)."""
        n = len(ranks)
        step = ranks[1] - ranks[0] if n > 1 else 0
        if n == self.tp and step == 1:
            return "tp"
        if n == self.fsdp and step == self.tp:
            return "fsdp"
        if n == self.dp and step == self.tp * self.fsdp:
            return "dp"
        if n == self.dp * self.fsdp and step == self.tp:
            return "dp+fsdp"
        if n == self.world and n > 1:
            return "world"
        return f"{n} ranks"


_META_LIB = None


def _register_missing_meta_kernels() -> None:
    """Meta kernels for c10d's coalesced reduce-scatter and all-gather, which
    torch lacks and DTensor's functional collectives (sequence parallelism's
    reduce-scatters and all-gathers) reach under the fake mode: each pair
    through the single-tensor op, whose Meta kernel torch has (the fake group
    moves nothing either way). Only Meta tensors take them; a real job never
    does."""
    global _META_LIB
    if _META_LIB is not None:
        return
    lib = torch.library.Library("c10d", "IMPL")

    def rs_coalesced(outputs, inputs, process_group, reduce_op, async_op=True, timeout=-1):
        work = None
        for o, i in zip(outputs, inputs, strict=True):
            _, work = torch.ops.c10d._reduce_scatter_base_.default(
                o, i, process_group, reduce_op, async_op, timeout
            )
        return work

    def ag_coalesced(outputs, inputs, process_group, async_op=True):
        work = None
        for o, i in zip(outputs, inputs, strict=True):
            _, work = torch.ops.c10d._allgather_base_.default(o, i, process_group, async_op)
        return work

    lib.impl("reduce_scatter_tensor_coalesced_", rs_coalesced, "Meta")
    lib.impl("allgather_into_tensor_coalesced_", ag_coalesced, "Meta")
    _META_LIB = lib


@contextlib.contextmanager
def fake_process_group(world: int):
    """torch.distributed initialized with the fake backend for neuron and the CPU
    (world size ``world``, rank 0), destroyed on exit. Refuses to run inside an
    initialized job: the plan would replace its default group."""
    if dist.is_initialized():
        raise RuntimeError(
            "torch.distributed is already initialized: a planning run needs its own "
            "(fake) process group; run it in a process without one"
        )
    _register_missing_meta_kernels()
    dist.init_process_group("neuron:fake,cpu:fake", store=FakeStore(), rank=0, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()


def device_mesh(layout: Layout):
    """The (dp, fsdp, tp) mesh over the fake group and its sub-meshes, made outside
    the fake mode (a mesh computes with real CPU tensors)."""
    mesh = init_device_mesh(
        "neuron", (layout.dp, layout.fsdp, layout.tp), mesh_dim_names=("dp", "fsdp", "tp")
    )
    shard = mesh["dp", "fsdp"] if layout.dp > 1 else mesh["fsdp"]
    return mesh, mesh["tp"], shard


def _plan_style(style: str, sequence_parallel: bool = False):
    # lazy: DTensor (see the imports)
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    if style.startswith("colwise"):
        return ColwiseParallel()
    if style.startswith("rowwise"):
        # Sequence parallel: reduce-scatter onto the sequence, kept a DTensor.
        if sequence_parallel:
            return RowwiseParallel(output_layouts=Shard(1), use_local_output=False)
        return RowwiseParallel()
    return None  # replicated (norms): left to FSDP


def tp_plan_for(model, sequence_parallel: bool = False) -> dict:
    """Per decoder layer: submodule path -> parallel style, from the model's own
    Hugging Face plan (``config.base_model_tp_plan``) where it has one, else the
    Llama/Qwen block plan (attention and MLP projections column-wise in,
    row-wise out).

    ``sequence_parallel``: TorchTitan's and Megatron's sequence parallelism on
    top — the norms run on S/TP rows (``SequenceParallel``), the attention and
    MLP inputs are all-gathered to the full sequence before the column-wise
    projections, and the row-wise projections reduce-scatter onto the sequence
    dimension instead of all-reducing. Attention itself runs on the full
    sequence with the rank's heads."""
    cfg = getattr(model, "config", None)
    hf = getattr(cfg, "base_model_tp_plan", None) or {}
    plan = {}
    for pattern, style in hf.items():
        if not pattern.startswith("layers.*."):
            continue
        p = _plan_style(style, sequence_parallel)
        if p is not None:
            plan[pattern[len("layers.*.") :]] = p
    if not plan:
        plan = {
            k: _plan_style(v, sequence_parallel)
            for k, v in (
                ("self_attn.q_proj", "colwise"),
                ("self_attn.k_proj", "colwise"),
                ("self_attn.v_proj", "colwise"),
                ("self_attn.o_proj", "rowwise"),
                ("mlp.gate_proj", "colwise"),
                ("mlp.up_proj", "colwise"),
                ("mlp.down_proj", "rowwise"),
            )
        }
    if sequence_parallel:
        # lazy: DTensor (see the imports)
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor.parallel import PrepareModuleInput, SequenceParallel

        # The residual stream stays a DTensor sharded on the sequence (global
        # shape), so Hugging Face's own shape code (positions, masks, views)
        # sees the full sequence. HF calls attention with keyword arguments.
        plan.update(
            {
                "input_layernorm": SequenceParallel(),
                "post_attention_layernorm": SequenceParallel(),
                "self_attn": PrepareModuleInput(
                    input_kwarg_layouts={"hidden_states": Shard(1)},
                    desired_input_kwarg_layouts={"hidden_states": Replicate()},
                ),
                "mlp": PrepareModuleInput(
                    input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
                ),
            }
        )
    return plan


def _root_sp_plan(model, vocab_parallel: bool = True) -> dict:
    """Sequence parallelism outside the decoder layers: the embedding's output
    sharded on the sequence (TorchTitan's vocabulary-parallel embedding,
    reduce-scattered; a chunk of the whole embedding's output when lm_head
    shares its weight or ``vocab_parallel`` is False), the final norm on S/TP
    rows, and its output gathered before lm_head — which stays whole on each
    TP rank as without sequence parallelism, so the loss needs nothing
    parallel."""
    # lazy: DTensor (see the imports)
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        PrepareModuleInput,
        PrepareModuleOutput,
        RowwiseParallel,
        SequenceParallel,
    )

    base = model.model
    emb, head = base.embed_tokens, getattr(model, "lm_head", None)
    tied = head is not None and head.weight is emb.weight
    whole = tied or not vocab_parallel
    plan = {
        "model.embed_tokens": PrepareModuleOutput(
            output_layouts=Replicate(), desired_output_layouts=Shard(1), use_local_output=False
        )
        if whole
        else RowwiseParallel(
            input_layouts=Replicate(), output_layouts=Shard(1), use_local_output=False
        ),
        "model.norm": SequenceParallel(),
    }
    if head is not None:
        plan["lm_head"] = PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True
        )
    return plan


def apply(
    model,
    layers: list,
    layout: Layout,
    tp_mesh,
    shard_mesh,
    checkpoint: bool | str | int = False,
    sequence_parallel: bool = False,
    vocab_parallel: bool = True,
):
    """TP (with sequence parallelism, optional) on each decoder layer,
    activation checkpointing (``checkpointing.parse``'s policies), FSDP2 on
    each layer and the root — TorchTitan's order. Returns the model (the root may be wrapped)."""
    # lazy: FSDP2, DTensor (see the imports)
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    if layout.tp > 1:
        if not layers:
            raise ValueError("tp > 1 needs a model with decoder layers (model.model.layers)")
        plan = tp_plan_for(model, sequence_parallel)
        for layer in layers:
            parallelize_module(layer, tp_mesh, plan)
        # Without sequence parallelism embeddings and lm_head stay whole on
        # each TP rank (FSDP shards them): HF's lm_head plan (column-wise,
        # logits gathered) made DTensor run the product both sharded and whole
        # in a fake run.
        if sequence_parallel:
            parallelize_module(model, tp_mesh, _root_sp_plan(model, vocab_parallel))
    elif sequence_parallel:
        raise ValueError("sequence_parallel needs tp > 1 (it shards the sequence over TP ranks)")
    if ckpt.parse(checkpoint) != "none":
        base = model.model
        for i, layer in enumerate(ckpt.wrap_layers(layers, checkpoint)):
            base.layers[i] = layer
        layers = list(base.layers)
    if layout.fsdp * layout.dp > 1:
        for i, layer in enumerate(layers):
            # The last layer's parameters are used again at once by backward.
            fully_shard(layer, mesh=shard_mesh, reshard_after_forward=i < len(layers) - 1)
        fully_shard(model, mesh=shard_mesh)
    return model


def real_foreach(params) -> bool:
    """Whether torch.optim would take its foreach path for these parameters on a
    real neuron run (``_default_to_fused_or_foreach``: plain tensors on a device
    with foreach kernels; DTensors — FSDP2, TP — are not plain). Fake parameters
    are a tensor subclass, so the choice is made here and passed explicitly."""
    from torch.distributed.tensor import DTensor  # lazy: DTensor (see the imports)

    if "neuron" not in _get_foreach_kernels_supported_devices():
        return False
    return not any(isinstance(p, DTensor) for p in params)


def local(t: torch.Tensor) -> torch.Tensor:
    return getattr(t, "_local_tensor", t)


def fsdp_resizable_tensors(model) -> list:
    """The tensors whose storage FSDP2 allocates and frees in place (each
    parameter's all-gather outputs and unsharded inner tensors), once its lazy
    initialisation has run (the first forward)."""
    out = []
    for mod in model.modules():
        get = getattr(mod, "_get_fsdp_state", None)
        if get is None:
            continue
        for group in getattr(get(), "_fsdp_param_groups", None) or ():
            for fp in group.fsdp_params:
                out.extend(getattr(fp, "all_gather_outputs", ()) or ())
                out.extend(getattr(fp, "_unsharded_inner_tensors", ()) or ())
    return out
