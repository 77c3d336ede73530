"""Models for a planning run: a Hugging Face causal LM from its configuration
(no weights are downloaded: the model is built under the fake mode), with
built-in configurations for models a plan is often made for, so planning works
without network access.

The built-in configurations are the models' published ``config.json`` values
(the Hugging Face model cards); a name not listed is looked up with
``transformers.AutoConfig.from_pretrained`` (network or local cache).

transformers is not a dependency of torch-neuronx (and ~1 s to import): the
functions that need it import it.
"""

from __future__ import annotations

import contextlib

import torch
from torch._subclasses.fake_tensor import FakeTensor

# Published config.json values (huggingface.co/<name>/blob/main/config.json).
KNOWN_CONFIGS: dict = {
    "Qwen/Qwen3-8B": {
        "model_type": "qwen3",
        "vocab_size": 151936,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "hidden_act": "silu",
        "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "use_sliding_window": False,
    },
    "meta-llama/Llama-3.1-8B": {
        "model_type": "llama",
        "vocab_size": 128256,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_act": "silu",
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
    },
    "meta-llama/Llama-2-7b-hf": {
        "model_type": "llama",
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
    },
    "meta-llama/Llama-2-70b-hf": {
        "model_type": "llama",
        "vocab_size": 32000,
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
    },
    "meta-llama/Llama-3.3-70B-Instruct": {
        "model_type": "llama",
        "vocab_size": 128256,
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "hidden_act": "silu",
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
    },
}

# Short names.
ALIASES = {
    "qwen3-8b": "Qwen/Qwen3-8B",
    "llama3.1-8b": "meta-llama/Llama-3.1-8B",
    "llama2-7b": "meta-llama/Llama-2-7b-hf",
    "llama2-70b": "meta-llama/Llama-2-70b-hf",
    "llama3.3-70b": "meta-llama/Llama-3.3-70B-Instruct",
}

DTYPES = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "fp32": torch.float32,
    "float32": torch.float32,
}


def parse_dtype(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    d = DTYPES.get(str(dtype).lower())
    if d is None:
        raise ValueError(f"unknown dtype {dtype!r}: expected one of {sorted(DTYPES)}")
    return d


def hf_config(model, overrides: dict | None = None):
    """A transformers config for a name (built-in or looked up), a dict (with
    ``model_type``) or a config object."""
    import transformers  # optional: transformers (module docstring)

    if isinstance(model, transformers.PretrainedConfig):
        cfg = model
    else:
        if isinstance(model, str):
            name = ALIASES.get(model.lower(), model)
            d = KNOWN_CONFIGS.get(name)
            if d is None:
                try:
                    cfg = transformers.AutoConfig.from_pretrained(name)
                except Exception as e:
                    raise ValueError(
                        f"no configuration for {model!r}: not built in "
                        f"({', '.join(sorted(KNOWN_CONFIGS))}) and the Hub lookup failed ({e})"
                    ) from None
                d = None
            if d is not None:
                cfg = _config_from_dict(dict(d))
        elif isinstance(model, dict):
            cfg = _config_from_dict(dict(model))
        else:
            raise ValueError(f"model must be a name, a config dict or a config, not {type(model)}")
    for k, v in (overrides or {}).items():
        setattr(cfg, k, v)
    return cfg


def _config_from_dict(d: dict):
    import transformers  # optional: transformers (module docstring)

    mt = d.pop("model_type", None)
    if mt is None:
        raise ValueError("a config dict needs 'model_type' (e.g. 'qwen3', 'llama')")
    return transformers.AutoConfig.for_model(mt, **d)


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def build_hf_causal_lm(cfg, dtype: torch.dtype):
    """The causal LM of ``cfg`` with parameters in ``dtype``, built on the current
    device and mode (the planning run: fake tensors on neuron), attention through
    PyTorch's SDPA (the eager path's attention on neuron)."""
    import transformers  # optional: transformers (module docstring)

    cfg._attn_implementation = "sdpa"
    # Parameters are made in the dtype (a fake tensor cannot be converted in
    # place by Module.to: it swaps tensors, which the fake mode's weak
    # references forbid).
    with default_dtype(dtype):
        return transformers.AutoModelForCausalLM.from_config(cfg)


@contextlib.contextmanager
def transformers_sees_values():
    """transformers decides its attention mask by reading values (no padding: SDPA's
    is_causal instead of a mask; one sequence per row: no packed-sequence mask),
    except while "tracing", which it takes a fake tensor to mean — it then builds
    the general mask, which the real eager run does not. For the planning run,
    masking_utils.is_tracing ignores fake tensors (its other checks stay), and the
    reads are answered by the capture mode (Capture._read). Restored on exit."""
    try:
        import transformers.masking_utils as mu  # optional: transformers (module docstring)
    except ImportError:
        yield
        return
    orig = mu.is_tracing

    def is_tracing(tensor=None):
        return orig(None if isinstance(tensor, FakeTensor) else tensor)

    mu.is_tracing = is_tracing
    try:
        yield
    finally:
        mu.is_tracing = orig


def decoder_layers(model) -> list:
    """The repeated decoder blocks of a causal LM (``model.model.layers``), or []."""
    base = getattr(model, "model", None)
    layers = getattr(base, "layers", None)
    return list(layers) if layers is not None else []


def model_flops_per_token(cfg, seq_len: int, training: bool) -> float:
    """Flops per token of a decoder LM (TorchTitan's count: 6 x parameters outside
    the embedding + 12 x layers x heads x head_dim x sequence for attention, in
    training; a third of it for a forward pass)."""
    h = cfg.hidden_size
    layers = cfg.num_hidden_layers
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or h // heads
    kv = getattr(cfg, "num_key_value_heads", heads) or heads
    inter = cfg.intermediate_size
    attn = h * heads * head_dim + 2 * h * kv * head_dim + heads * head_dim * h
    mlp = 3 * h * inter
    per_layer = attn + mlp
    lm_head = h * cfg.vocab_size
    params = layers * per_layer + lm_head
    f = 6 * params + 12 * layers * heads * head_dim * seq_len
    return f if training else f / 3
