"""The model rows of the validation table: planning runs
(``torch_neuronx.estimate.plan_training`` / ``plan_generate``) of the published
workloads (validation.py's model rows).

A row's ``spec`` names the run; rows that read the same run (a generate()'s
prefill and its decode step) share it: runs are cached by their arguments for
the process.

How a published figure maps onto a run:

- training throughput (sequences/s over a global batch with gradient
  accumulation): one planned step of a microbatch per data-parallel rank gives
  forward + backward (``step_s`` less the optimizer phase) and the optimizer;
  a step of ``grad_accum`` microbatches is ``grad_accum`` x (forward + backward)
  + one optimizer step;
- time to first token: the planned prefill of the prompt;
- time per output token: the planned decode step after the prompt.

Where the published run replicates key/value heads to the tensor-parallel
degree (NxD and transformers-neuronx do when TP exceeds the KV heads), the
planned model does the same (``num_key_value_heads`` = TP): each rank then
holds and computes what the published rank does.
"""

from __future__ import annotations

import functools
import json

import torch

from .published_figures import Figure
from .run import plan_generate, plan_training

# BERT-Large (google-bert/bert-large-uncased config.json), for the encoder row.
BERT_LARGE = {
    "vocab_size": 30522,
    "hidden_size": 1024,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "intermediate_size": 4096,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
}


def _bert_pretraining(batch: int, seq: int):
    # optional: transformers is not a dependency (estimate/models.py)
    from transformers import BertConfig, BertForPreTraining

    cfg = BertConfig(**BERT_LARGE)

    def model():
        return BertForPreTraining(cfg)

    def inputs():
        ids = torch.randint(0, cfg.vocab_size, (batch, seq))
        nsp = torch.randint(0, 2, (batch,))
        return ids, nsp

    def loss(out, ids, nsp):
        f = torch.nn.functional
        mlm = f.cross_entropy(out.prediction_logits.float().flatten(0, 1), ids.flatten())
        return mlm + f.cross_entropy(out.seq_relationship_logits.float(), nsp)

    model.__name__ = "bert-large-pretraining"
    return model, inputs, loss


@functools.cache
def _run(kind: str, key: str):
    kw = json.loads(key)
    if kind == "generate":
        return plan_generate(kw.pop("model"), **kw)
    model = kw.pop("model")
    if model == "bert-large":
        m, inputs, loss = _bert_pretraining(kw["batch"], kw["seq_len"])
        return plan_training(m, inputs=inputs, loss=loss, **kw)
    return plan_training(model, **kw)


def _args(fig: Figure) -> tuple[str, dict]:
    s = fig.spec
    kw = {"model": s["model"], "target": fig.target, "lnc": fig.lnc, "tp": s.get("tp", 1)}
    if s.get("kv_heads"):
        kw["config_overrides"] = {"num_key_value_heads": s["kv_heads"]}
    if s.get("sequence_parallel"):
        kw["sequence_parallel"] = True
    if s["mode"] == "train":
        kw.update(batch=s["microbatch"], seq_len=s["seq"], dp=s.get("dp", 1))
        return "train", kw
    kw.update(batch=s.get("batch", 1), prompt_len=s["prompt"], new_tokens=2)
    return "generate", kw


def run_for(fig: Figure):
    """The planning report a row reads (cached)."""
    kind, kw = _args(fig)
    return _run(kind, json.dumps(kw, sort_keys=True))


def estimate(fig: Figure) -> tuple[float, str]:
    """Our figure for a model row, in seconds, and what bounds it."""
    r = run_for(fig)
    mode = fig.spec["mode"]
    if mode == "prefill":
        return r.prefill_s, f"prefill of {r.seq_len} tokens; {r.bound}-bound"
    if mode == "decode":
        return r.decode_step_s, f"decode step; {r.bound}-bound"
    opt = r.per_phase_s.get("optimizer", 0.0)
    micro = r.step_s - opt
    accum = int(fig.spec.get("grad_accum", 1))
    per = fig.spec.get("per", "step")
    total = accum * micro + opt
    if per == "microbatch":
        total /= accum
    return total, (
        f"{accum} x {micro * 1e3:.1f} ms (fwd+bwd) + optimizer {opt * 1e3:.1f} ms; "
        f"{r.bound}-bound, MFU {r.mfu:.0%}"
    )
