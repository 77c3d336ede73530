"""python -m torch_neuronx.estimate: the planning estimate of a model's training
step or generate() call on Trainium, from its configuration alone.

    python -m torch_neuronx.estimate --model Qwen/Qwen3-8B --config-only \\
        --target trn2 --lnc 2 --tp 4 --fsdp 8 --dp 1 --seq-len 4096 --batch 1 --dtype bf16
    python -m torch_neuronx.estimate --torchtitan qwen3_8b.toml --cores 64
"""

from __future__ import annotations

import argparse
import json
import sys

from . import torchtitan_recipe
from .models import KNOWN_CONFIGS
from .run import plan_generate, plan_training


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m torch_neuronx.estimate",
        description=(
            "Estimate a model's training step (or generate()) on Trainium without running "
            "it: fake tensors on neuron, the real FSDP2/TP layout over a fake process group, "
            "each device item and collective costed as the profiler would."
        ),
    )
    p.add_argument(
        "--torchtitan",
        metavar="RECIPE.toml",
        help="plan a TorchTitan training recipe as written: model flavor, parallel degrees, "
        "activation checkpointing, batch and sequence length from the file (with --cores "
        "when it leaves data_parallel_shard_degree at -1); --target, --lnc and --layers apply",
    )
    p.add_argument(
        "--model",
        help=f"a Hugging Face model name (built in: {', '.join(sorted(KNOWN_CONFIGS))}; "
        "others are looked up on the Hub) or a path to a config.json",
    )
    p.add_argument(
        "--config-only",
        action="store_true",
        help="build the model from its configuration (always the case: no weights are "
        "downloaded; accepted for clarity)",
    )
    p.add_argument("--target", default="trn2", help="trn1, trn2 or trn3 (default trn2)")
    p.add_argument("--lnc", type=int, default=0, help="logical core size (default: 2 on trn2/3)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    p.add_argument("--fsdp", type=int, default=1, help="FSDP2 shard degree")
    p.add_argument("--dp", type=int, default=1, help="data-parallel replicas (HSDP with --fsdp)")
    p.add_argument("--cores", type=int, default=None, help="NeuronCores (checked: tp*fsdp*dp)")
    p.add_argument("--seq-len", type=int, default=4096, help="tokens per sequence (prompt)")
    p.add_argument("--batch", type=int, default=1, help="sequences per data-parallel rank")
    p.add_argument("--dtype", default="bf16", help="parameter and activation dtype")
    p.add_argument(
        "--activation-checkpointing",
        nargs="?",
        const="full",
        default="none",
        metavar="POLICY",
        help="recompute in backward: full (the default when given alone: every layer), op "
        "(TorchTitan's selective per-op policy) or a layer frequency N (every Nth layer)",
    )
    p.add_argument(
        "--sequence-parallel",
        action="store_true",
        help="TP with sequence parallelism: norms on S/TP rows, reduce-scatter and "
        "all-gather in place of TP's all-reduce (needs --tp > 1; with --generate, the "
        "prefill only)",
    )
    p.add_argument("--layers", type=int, default=None, help="override the number of layers")
    p.add_argument("--generate", action="store_true", help="estimate generate() instead")
    p.add_argument("--new-tokens", type=int, default=16, help="tokens generate() produces")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


def _model_arg(model: str):
    if model.endswith(".json"):
        with open(model) as f:
            return json.load(f)
    return model


def _plan_recipe(args, overrides):
    recipe = torchtitan_recipe.load(args.torchtitan, cores=args.cores)
    r = plan_training(
        recipe.config,
        target=args.target,
        lnc=args.lnc or None,
        config_overrides=overrides,
        **recipe.kwargs,
    )
    r.model = recipe.model
    r.notes = recipe.notes + list(r.notes)
    return r


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if (args.model is None) == (args.torchtitan is None):
        parser.error("give --model or --torchtitan RECIPE.toml (one of them)")
    if args.torchtitan and args.generate:
        parser.error("--torchtitan plans a training recipe (no --generate)")
    overrides = {"num_hidden_layers": args.layers} if args.layers else None
    try:
        if args.torchtitan:
            r = _plan_recipe(args, overrides)
        elif args.generate:
            if args.fsdp != 1:
                raise ValueError("--generate takes --tp and --dp (no FSDP in inference)")
            r = plan_generate(
                _model_arg(args.model),
                target=args.target,
                lnc=args.lnc or None,
                tp=args.tp,
                dp=args.dp,
                cores=args.cores,
                batch=args.batch,
                prompt_len=args.seq_len,
                new_tokens=args.new_tokens,
                dtype=args.dtype,
                sequence_parallel=args.sequence_parallel,
                config_overrides=overrides,
            )
        else:
            r = plan_training(
                _model_arg(args.model),
                target=args.target,
                lnc=args.lnc or None,
                tp=args.tp,
                fsdp=args.fsdp,
                dp=args.dp,
                cores=args.cores,
                batch=args.batch,
                seq_len=args.seq_len,
                dtype=args.dtype,
                activation_checkpointing=args.activation_checkpointing,
                sequence_parallel=args.sequence_parallel,
                config_overrides=overrides,
            )
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(r.to_json(indent=1) if args.json else r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
