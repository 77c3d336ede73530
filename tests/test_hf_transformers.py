"""transformers on neuron as its users run it: ``generate`` and ``Trainer``.

Every model is a tiny one built from a config (nothing is downloaded). Greedy, beam
search and static-cache generation must give CPU's tokens; seeded sampling must be
reproducible and valid; ``Trainer`` (bf16, gradient accumulation) must pick
``neuron:0`` and follow CPU's losses; the Mixture-of-Experts models (Mixtral, OLMoE,
ERNIE-4.5-MoE) must train and generate exactly like on CPU.
"""

import copy
import os

# Before any Hugging Face import: nothing may be downloaded.
os.environ["HF_HUB_OFFLINE"] = "1"

import pytest
import torch
from datasets import Dataset
from hf_tiny import DECODER, SPECIAL_IDS, VOCAB, llama_tokenizer, tiny_llama
from transformers import (
    AutoModelForCausalLM,
    Ernie4_5_MoeConfig,
    Ernie4_5_MoeForCausalLM,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    OlmoeConfig,
    OlmoeForCausalLM,
    Trainer,
    TrainingArguments,
    pipeline,
)


def _gpt2() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, **SPECIAL_IDS
    )
    return GPT2LMHeadModel(cfg).eval()


MODELS = {"llama": tiny_llama, "gpt2": _gpt2}


def _prompts(batch=2, length=6, seed=0) -> torch.Tensor:
    # Token ids past the special ones, so no prompt ends early.
    return torch.randint(3, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def _pair(make):
    """The same model on the CPU and on neuron."""
    cpu = make()
    return cpu, copy.deepcopy(cpu).to("neuron")


# ---------------------------------------------------------------------------- generate


@pytest.mark.parametrize("arch", sorted(MODELS))
def test_generate_greedy_matches_cpu(arch):
    cpu, dev = _pair(MODELS[arch])
    ids = _prompts()
    ref = cpu.generate(ids, max_new_tokens=8, do_sample=False)
    out = dev.generate(ids.to("neuron"), max_new_tokens=8, do_sample=False)
    assert out.device == torch.device("neuron:0")
    assert torch.equal(out.cpu(), ref)


def test_generate_greedy_left_padded_batch_matches_cpu():
    cpu, dev = _pair(tiny_llama)
    ids = _prompts(batch=3)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # left padding, as a tokenizer with padding_side="left" makes
    mask[1, :4] = 0
    ids = ids.masked_fill(mask == 0, 0)
    ref = cpu.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
    out = dev.generate(
        ids.to("neuron"), attention_mask=mask.to("neuron"), max_new_tokens=8, do_sample=False
    )
    assert torch.equal(out.cpu(), ref)


def test_generate_beam_search_matches_cpu():
    cpu, dev = _pair(tiny_llama)
    ids = _prompts()
    kw = {
        "max_new_tokens": 8,
        "do_sample": False,
        "num_beams": 3,
        "num_return_sequences": 2,
        "return_dict_in_generate": True,
        "output_scores": True,
    }
    ref = cpu.generate(ids, **kw)
    out = dev.generate(ids.to("neuron"), **kw)
    assert out.sequences.shape == (4, 14)
    assert torch.equal(out.sequences.cpu(), ref.sequences)
    torch.testing.assert_close(
        out.sequences_scores.cpu(), ref.sequences_scores, rtol=1e-4, atol=1e-5
    )


def test_generate_sampling_is_seeded_and_valid():
    _, dev = _pair(tiny_llama)
    ids = _prompts().to("neuron")
    kw = {"max_new_tokens": 10, "do_sample": True, "temperature": 0.8, "top_k": 20, "top_p": 0.9}

    def sample(seed):
        torch.manual_seed(seed)
        return dev.generate(ids, **kw)

    a, b, c = sample(0), sample(0), sample(1)
    assert a.device.type == "neuron"
    assert a.shape == (2, 16)
    assert a.dtype == torch.long
    assert torch.equal(a[:, :6], ids)  # the prompt is kept
    new = a[:, 6:].cpu()
    assert bool(((new >= 0) & (new < VOCAB)).all())
    assert torch.equal(a, b)  # same seed, same tokens
    assert not torch.equal(a, c)  # another seed, other tokens
    # top_k=1 leaves one candidate: sampling must then give the greedy tokens.
    torch.manual_seed(2)
    top1 = dev.generate(ids, max_new_tokens=10, do_sample=True, top_k=1)
    greedy = dev.generate(ids, max_new_tokens=10, do_sample=False)
    assert torch.equal(top1, greedy)


def test_generate_static_cache_matches_cpu():
    # As users run it: on neuron, transformers compiles the decoding step of a static
    # cache with torch.compile(backend="neuron") (PreTrainedModel._default_compile_config).
    cpu, dev = _pair(tiny_llama)
    ids = _prompts()
    kw = {"max_new_tokens": 8, "do_sample": False, "cache_implementation": "static"}
    ref = cpu.generate(ids, **kw)
    out = dev.generate(ids.to("neuron"), **kw)
    assert torch.equal(out.cpu(), ref)


def test_generate_static_cache_uncompiled_matches_cpu():
    # The StaticCache itself (index_copy_ into preallocated key/value tensors), eagerly.
    cpu, dev = _pair(tiny_llama)
    ids = _prompts()
    kw = {"max_new_tokens": 8, "do_sample": False, "cache_implementation": "static"}
    ref = cpu.generate(ids, **kw)
    out = dev.generate(ids.to("neuron"), disable_compile=True, **kw)
    assert torch.equal(out.cpu(), ref)


# ------------------------------------------------------------- loading and pipelines


def test_from_pretrained_device_map_loads_on_neuron(tmp_path):
    cpu = tiny_llama()
    cpu.save_pretrained(tmp_path)
    ids = _prompts()
    ref = cpu.generate(ids, max_new_tokens=8, do_sample=False)

    last = torch.device("neuron", torch.neuron.device_count() - 1)
    one = AutoModelForCausalLM.from_pretrained(tmp_path, device_map=str(last))
    assert {p.device for p in one.parameters()} == {last}
    assert torch.equal(one.generate(ids.to(last), max_new_tokens=8).cpu(), ref)

    half = AutoModelForCausalLM.from_pretrained(tmp_path, device_map="neuron", dtype=torch.bfloat16)
    assert {(p.device.type, p.dtype) for p in half.parameters()} == {("neuron", torch.bfloat16)}

    # "auto" spreads the layers over the visible cores (as over GPUs); generate
    # then hops between devices at the layer boundaries.
    spread = AutoModelForCausalLM.from_pretrained(tmp_path, device_map="auto")
    devices = {torch.device("neuron", i) for i in spread.hf_device_map.values()}
    assert {p.device for p in spread.parameters()} == devices
    if torch.neuron.device_count() > 1:
        assert len(devices) > 1, spread.hf_device_map
    assert torch.equal(spread.generate(ids.to("neuron:0"), max_new_tokens=8).cpu(), ref)


def test_text_generation_pipeline_matches_cpu(tmp_path):
    tiny_llama().save_pretrained(tmp_path)
    llama_tokenizer().save_pretrained(tmp_path)
    texts = {}
    for dev in ("cpu", "neuron"):
        pipe = pipeline("text-generation", model=str(tmp_path), device=dev)
        assert pipe.model.device.type == dev
        out = pipe(["w5 w6 w7", "w40 w41"], max_new_tokens=6, do_sample=False)
        texts[dev] = [o[0]["generated_text"] for o in out]
    assert texts["neuron"] == texts["cpu"]


# ----------------------------------------------------------------------------- Trainer


def _pattern_dataset(n=8, length=16) -> Dataset:
    # Counting sequences (a learnable pattern), so a few steps lower the loss.
    rows = [[4 + (s * 3 + j) % 32 for j in range(length)] for s in range(n)]
    return Dataset.from_dict({"input_ids": rows, "labels": rows})


def _train(tmp_path, use_cpu: bool):
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**DECODER))
    args = TrainingArguments(
        output_dir=str(tmp_path / ("cpu" if use_cpu else "neuron")),
        use_cpu=use_cpu,
        bf16=True,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        max_steps=6,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        seed=0,
        dataloader_num_workers=0,
    )
    trainer = Trainer(model=model, args=args, train_dataset=_pattern_dataset())
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return args.device, next(model.parameters()).device, trainer.state.global_step, losses


def test_trainer_bf16_grad_accumulation_matches_cpu(tmp_path):
    device, param_device, steps, losses = _train(tmp_path, use_cpu=False)
    assert device == torch.device("neuron:0")
    assert param_device == torch.device("neuron:0")
    assert steps == 6 and len(losses) == 6
    assert losses[-1] < losses[0] - 0.5, losses
    cpu_device, _, _, cpu_losses = _train(tmp_path, use_cpu=True)
    assert cpu_device == torch.device("cpu")
    # bf16 autocast on both sides: the losses agree to bf16 precision.
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses), rtol=2e-2, atol=0)


# ------------------------------------------------------------------ Mixture of Experts


def _mixtral():
    return MixtralForCausalLM(
        MixtralConfig(
            **DECODER, num_local_experts=4, num_experts_per_tok=2, output_router_logits=True
        )
    )


def _olmoe():
    return OlmoeForCausalLM(
        OlmoeConfig(**DECODER, num_experts=4, num_experts_per_tok=2, output_router_logits=True)
    )


def _ernie_moe():
    cfg = Ernie4_5_MoeConfig(
        **DECODER,
        moe_intermediate_size=32,
        moe_num_experts=4,
        moe_k=2,
        moe_num_shared_experts=1,
        output_router_logits=True,
    )
    return Ernie4_5_MoeForCausalLM(cfg)


MOE = {"mixtral": _mixtral, "olmoe": _olmoe, "ernie4_5_moe": _ernie_moe}


@pytest.mark.parametrize("arch", sorted(MOE))
def test_moe_trains_and_generates_like_cpu(arch):
    torch.manual_seed(0)
    cpu = MOE[arch]()
    dev = copy.deepcopy(cpu).to("neuron")
    ids = _prompts(batch=2, length=8)
    results = {}
    for name, model in (("cpu", cpu), ("neuron", dev)):
        x = ids.to(name)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        losses = []
        for _ in range(3):
            out = model(input_ids=x, labels=x)  # LM loss + router aux loss
            out.loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(out.loss.detach().cpu())
        model.eval()
        tokens = model.generate(x, max_new_tokens=6, do_sample=False)
        results[name] = (torch.stack(losses), tokens.cpu())
    assert results["neuron"][0][-1] < results["neuron"][0][0]
    torch.testing.assert_close(results["neuron"][0], results["cpu"][0], rtol=1e-4, atol=1e-5)
    assert torch.equal(results["neuron"][1], results["cpu"][1])
