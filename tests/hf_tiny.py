"""Tiny Hugging Face models and tokenizers built in code, for the test_hf_* suites.

Importing this module turns the Hub off (``HF_HUB_OFFLINE=1``): nothing is downloaded.
"""

import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
import transformers
from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers import models as tok_models
from transformers import (
    BertConfig,
    BertModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

transformers.logging.set_verbosity_error()

VOCAB = 128
SPECIAL_IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
# A decoder config shared by Llama and the MoE models: hidden 32, 2 layers, GQA.
DECODER = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    **SPECIAL_IDS,
}


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**DECODER)).eval()


def word_tokenizer(words, specials, template, **special_tokens) -> PreTrainedTokenizerFast:
    """A word-level fast tokenizer: ids are the position in ``[*specials, *words]``."""
    vocab = {t: i for i, t in enumerate([*specials, *words])}
    tk = Tokenizer(tok_models.WordLevel(vocab=vocab, unk_token=special_tokens["unk_token"]))
    tk.normalizer = normalizers.Lowercase()
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.post_processor = template(vocab)
    tk.decoder = decoders.WordPiece()  # joins the words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tk, **special_tokens)


def llama_tokenizer() -> PreTrainedTokenizerFast:
    """Ids match DECODER: <pad>=0, <s>=1, </s>=2, <unk>=3, then the words w4..w127."""
    return word_tokenizer(
        [f"w{i}" for i in range(4, VOCAB)],
        ["<pad>", "<s>", "</s>", "<unk>"],
        lambda v: processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)]),
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
    )


BERT_WORDS = "hello world the cat sat on mat dog runs fast a is".split()


def bert_dir(path: Path) -> Path:
    """A tiny BertModel and its word-level tokenizer, saved as a model directory."""
    tokenizer = word_tokenizer(
        BERT_WORDS,
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
        lambda v: processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", v["[CLS]"]), ("[SEP]", v["[SEP]"])],
        ),
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=32,
    )
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertModel(cfg).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
