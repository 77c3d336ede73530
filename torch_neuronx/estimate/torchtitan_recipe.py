"""A TorchTitan training recipe (its ``.toml`` job file) as a planning run:
``python -m torch_neuronx.estimate --torchtitan RECIPE.toml``.

The file is read as TorchTitan reads it (``tomllib``; a key the file omits
takes TorchTitan's default, e.g. ``[activation_checkpoint] mode =
"selective"``, ``selective_ac_option = "2"``, ``data_parallel_shard_degree =
-1``). What the planner takes from it:

- ``[model] name, flavor``: the architecture TorchTitan builds for that flavor
  (its ``<name>_args[flavor]``, read from the installed ``torchtitan``), as the
  Hugging Face configuration of the same dimensions the planner builds;
- ``[training] local_batch_size, seq_len, mixed_precision_param``;
- ``[parallelism]``: ``tensor_parallel_degree`` (with TorchTitan's sequence
  parallelism on the norms), ``data_parallel_shard_degree`` (FSDP2; -1: the
  cores left over, so ``--cores`` is needed), ``data_parallel_replicate_degree``
  (HSDP replicas);
- ``[activation_checkpoint]``: ``none``, ``full`` or ``selective`` with ``op`` or
  a layer frequency (``checkpointing.py``).

What the plan cannot represent yet is refused with the reason (pipeline,
context and expert parallelism; the ``memory_budget`` policy) rather than
planned as something else; ``[compile] enable`` is planned as the eager step
and said so in the report's notes.
"""

from __future__ import annotations

import dataclasses
import importlib
import math

import tomllib

# TorchTitan 0.2's defaults for the keys the planner reads (job_config.py).
_DEFAULTS = {
    ("training", "local_batch_size"): 8,
    ("training", "seq_len"): 2048,
    ("training", "mixed_precision_param"): "bfloat16",
    ("parallelism", "data_parallel_replicate_degree"): 1,
    ("parallelism", "data_parallel_shard_degree"): -1,
    ("parallelism", "tensor_parallel_degree"): 1,
    ("parallelism", "pipeline_parallel_degree"): 1,
    ("parallelism", "context_parallel_degree"): 1,
    ("parallelism", "expert_parallel_degree"): 1,
    ("activation_checkpoint", "mode"): "selective",
    ("activation_checkpoint", "selective_ac_option"): "2",
    ("compile", "enable"): False,
}


@dataclasses.dataclass
class Recipe:
    path: str
    model: str  # "<name>:<flavor>"
    config: dict  # the Hugging Face configuration planned
    kwargs: dict  # plan_training's keyword arguments
    notes: list


def _get(doc: dict, section: str, key: str):
    return doc.get(section, {}).get(key, _DEFAULTS[(section, key)])


def _torchtitan_args(name: str, flavor: str):
    try:
        mod = importlib.import_module(f"torchtitan.models.{name}")
    except ImportError as e:
        raise ValueError(
            f"model {name!r}: planning a TorchTitan recipe reads the flavor's dimensions from "
            f"torchtitan (pip install torchtitan): {e}"
        ) from None
    table = getattr(mod, f"{name}_args", None)
    if table is None:
        raise ValueError(f"torchtitan.models.{name} has no {name}_args table of flavors")
    if flavor not in table:
        raise ValueError(f"{name} has no flavor {flavor!r} (valid: {', '.join(table)})")
    return table[flavor]


def _llama3_ffn(a) -> int:
    # TorchTitan's FeedForward sizing: 2/3 of 4*dim, scaled, rounded up.
    hidden = int(2 * (4 * a.dim) / 3)
    if a.ffn_dim_multiplier is not None:
        hidden = int(a.ffn_dim_multiplier * hidden)
    return a.multiple_of * math.ceil(hidden / a.multiple_of)


def hf_config_for(name: str, flavor: str) -> dict:
    """The Hugging Face configuration with the dimensions of TorchTitan's
    ``name`` / ``flavor`` model (dense Llama 3 and Qwen3)."""
    a = _torchtitan_args(name, flavor)
    common = {
        "hidden_size": a.dim,
        "num_hidden_layers": a.n_layers,
        "num_attention_heads": a.n_heads,
        "num_key_value_heads": a.n_kv_heads or a.n_heads,
        "vocab_size": a.vocab_size,
        "rms_norm_eps": a.norm_eps,
        "rope_theta": a.rope_theta,
        "max_position_embeddings": a.max_seq_len,
    }
    if name == "qwen3":
        common.update(head_dim=a.head_dim, tie_word_embeddings=bool(a.enable_weight_tying))
        if getattr(a, "moe_enabled", False):
            # A MoE step routes tokens by their values, which a planning run
            # (fake tensors) does not have: it needs an assumed routing.
            raise ValueError(
                f"qwen3 {flavor} is a mixture of experts: MoE models are not planned yet "
                "(their routing reads token values a planning run does not compute)"
            )
        return {**common, "model_type": "qwen3", "intermediate_size": a.hidden_dim}
    if name == "llama3":
        cfg = {**common, "model_type": "llama", "intermediate_size": _llama3_ffn(a)}
        r = getattr(a, "rope_scaling_args", None)
        if r is not None:
            cfg["rope_scaling"] = {
                "rope_type": "llama3",
                "factor": r.scaling_factor,
                "low_freq_factor": r.low_freq_factor,
                "high_freq_factor": r.high_freq_factor,
                "original_max_position_embeddings": r.original_max_position_embeddings,
            }
        return cfg
    raise ValueError(f"TorchTitan model {name!r} is not planned yet (llama3 and qwen3 are)")


def _policy(doc: dict):
    mode = str(_get(doc, "activation_checkpoint", "mode")).lower()
    if mode in ("none", "full"):
        return mode
    if mode == "selective":
        return str(_get(doc, "activation_checkpoint", "selective_ac_option"))
    raise ValueError(
        f"activation_checkpoint.mode = {mode!r} is not planned yet (none, full and selective are)"
    )


def load(path: str, *, cores: int | None = None) -> Recipe:
    """The planning run a TorchTitan ``.toml`` recipe describes. ``cores``: the
    job's NeuronCores (TorchTitan takes them from the launcher), needed when the
    file leaves ``data_parallel_shard_degree`` at -1."""
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    name = doc.get("model", {}).get("name", "llama3")
    flavor = str(doc.get("model", {}).get("flavor", "debugmodel"))
    for key, what in (
        ("pipeline_parallel_degree", "pipeline parallelism"),
        ("context_parallel_degree", "context parallelism"),
        ("expert_parallel_degree", "expert parallelism"),
    ):
        if int(_get(doc, "parallelism", key)) > 1:
            raise ValueError(f"parallelism.{key} > 1: {what} is not planned yet")
    tp = int(_get(doc, "parallelism", "tensor_parallel_degree"))
    dp = int(_get(doc, "parallelism", "data_parallel_replicate_degree"))
    fsdp = int(_get(doc, "parallelism", "data_parallel_shard_degree"))
    if fsdp == -1:
        if cores is None:
            raise ValueError(
                "data_parallel_shard_degree is -1 (the cores left over, as TorchTitan takes "
                "them from the launcher): give the job's NeuronCores with --cores"
            )
        if cores % (tp * dp):
            raise ValueError(f"--cores {cores} is not a multiple of TP {tp} x replicas {dp}")
        fsdp = cores // (tp * dp)
    if min(tp, dp, fsdp) < 1:
        raise ValueError(f"parallel degrees must be >= 1 (tp {tp}, fsdp {fsdp}, replicas {dp})")
    dtype = {"bfloat16": "bf16", "float32": "fp32"}.get(
        str(_get(doc, "training", "mixed_precision_param")), "bf16"
    )
    notes = [f"TorchTitan recipe {path}: {name} {flavor}"]
    if _get(doc, "compile", "enable"):
        notes.append("compile.enable: planned as the eager step (no compiled plan yet)")
    cfg = hf_config_for(name, flavor)
    kwargs = dict(
        tp=tp,
        fsdp=fsdp,
        dp=dp,
        cores=cores,
        batch=int(_get(doc, "training", "local_batch_size")),
        seq_len=int(_get(doc, "training", "seq_len")),
        dtype=dtype,
        activation_checkpointing=_policy(doc),
        sequence_parallel=tp > 1,  # TorchTitan's TP plan shards the norms' rows
    )
    return Recipe(path, f"{name}:{flavor}", cfg, kwargs, notes)
