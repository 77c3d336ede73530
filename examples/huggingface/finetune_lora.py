"""LoRA fine-tuning of a tiny Llama on neuron with PEFT and the transformers Trainer.

Everything is built in code (no download): a 2-layer Llama from a config, and a toy
task, counting (token ``t`` is followed by ``t + 1``). The base weights stay frozen;
only the LoRA adapters train, then ``merge_and_unload`` folds them into the weights.

    python examples/huggingface/finetune_lora.py            # on neuron
    python examples/huggingface/finetune_lora.py --cpu      # the same run on the CPU
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # autoloads torch_neuronx: the "neuron" device
import transformers
from datasets import Dataset
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

VOCAB = 64


def counting_dataset(n: int = 64, length: int = 16) -> Dataset:
    rows = [[1 + (start + j) % (VOCAB - 1) for j in range(length)] for start in range(n)]
    return Dataset.from_dict({"input_ids": rows, "labels": rows})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="train on the CPU instead")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    transformers.logging.set_verbosity_error()

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=0,
        eos_token_id=0,
    )
    lora = LoraConfig(
        r=8,
        lora_alpha=16,
        lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj"],
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(LlamaForCausalLM(config), lora)
    model.print_trainable_parameters()

    with tempfile.TemporaryDirectory() as out_dir:
        training_args = TrainingArguments(
            output_dir=out_dir,
            use_cpu=args.cpu,
            bf16=True,  # autocast to bfloat16 on the device
            per_device_train_batch_size=16,
            gradient_accumulation_steps=2,
            max_steps=args.steps,
            learning_rate=3e-2,
            lr_scheduler_type="constant",
            logging_steps=5,
            save_strategy="no",
            report_to=[],
            disable_tqdm=True,
            seed=0,
        )
        print(f"training on {training_args.device}")
        trainer = Trainer(model=model, args=training_args, train_dataset=counting_dataset())
        trainer.train()
    losses = [round(h["loss"], 3) for h in trainer.state.log_history if "loss" in h]
    print("losses every 5 steps:", losses)

    device = training_args.device
    prompt = torch.tensor([[10, 11, 12, 13]], device=device)
    # Training wrapped forward in bf16 autocast; compare in full precision.
    model = trainer.accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    model.eval()
    with torch.no_grad():
        unmerged = model(input_ids=prompt).logits
    merged = model.merge_and_unload()  # a plain LlamaForCausalLM again, LoRA folded in
    with torch.no_grad():
        diff = (merged(input_ids=prompt).logits - unmerged).abs().max().item()
    print(f"merged model: {type(merged).__name__} on {merged.device}, max |logit diff| {diff:.2e}")
    tokens = merged.generate(prompt, max_new_tokens=8, do_sample=False)
    print("prompt 10 11 12 13 ->", tokens[0, 4:].tolist())


if __name__ == "__main__":
    main()
