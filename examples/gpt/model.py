"""A small character-level GPT (decoder-only transformer) in plain PyTorch eager ops.

The model is a workload for exercising a device backend, so every layer is spelled out
with basic ops (linear, matmul, masked_fill, softmax, layer_norm, gelu, embedding)
instead of fused helpers such as ``F.scaled_dot_product_attention`` or
``nn.MultiheadAttention``: a backend must then implement the ops a typical user model
is made of, and its results can be compared op by op with the CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class GPTConfig:
    vocab_size: int
    n_layer: int = 6
    n_head: int = 8
    d_model: int = 256
    seq_len: int = 128
    dropout: float = 0.0
    # Sharing the embedding matrix with the LM head (as GPT-2 does) saves
    # vocab_size * d_model parameters and makes the embedding weight receive gradient
    # from two places, which is a useful accumulation case for a backend.
    tie_weights: bool = True


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        if cfg.d_model % cfg.n_head != 0:
            raise ValueError(f"d_model={cfg.d_model} not divisible by n_head={cfg.n_head}")
        self.n_head = cfg.n_head
        self.head_dim = cfg.d_model // cfg.n_head
        # One projection for q, k and v: a single larger matmul instead of three.
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.attn_drop = nn.Dropout(cfg.dropout)
        self.resid_drop = nn.Dropout(cfg.dropout)
        # True above the diagonal = future positions a token must not attend to. A
        # buffer (rather than a tensor built in forward) moves with .to(device) and is
        # created once; non-persistent because it is derived from the config and
        # need not be stored in checkpoints.
        mask = torch.triu(torch.ones(cfg.seq_len, cfg.seq_len, dtype=torch.bool), diagonal=1)
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        # (B, T, C) -> (B, n_head, T, head_dim) so that heads are a batch dimension.
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_head, self.head_dim).transpose(1, 2)

        # Scaling by 1/sqrt(head_dim) keeps logit variance ~1 so softmax does not
        # saturate at initialisation.
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        # Slicing handles sequences shorter than seq_len (e.g. during generation).
        att = att.masked_fill(self.causal_mask[:T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_drop(att)
        y = att @ v  # (B, n_head, T, head_dim)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.act = nn.GELU()
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(self.act(self.fc(x))))


class Block(nn.Module):
    """Pre-LayerNorm block: normalising before each sublayer keeps the residual stream
    an identity path, which trains stably without learning-rate warm-up."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_weights:
            self.lm_head.weight = self.tok_emb.weight

        # GPT-2 initialisation: small normal weights, zero biases. The output
        # projection of each residual branch is further scaled by 1/sqrt(2 * n_layer)
        # because 2 * n_layer branches add into the residual stream, so its variance
        # would otherwise grow with depth.
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self) -> int:
        # parameters() yields a tied weight once, so this counts it once.
        return sum(p.numel() for p in self.parameters())

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx, targets: (B, T) int64 ids. Returns (logits (B, T, vocab), loss)."""
        B, T = idx.shape
        if T > self.cfg.seq_len:
            raise ValueError(f"sequence length {T} exceeds seq_len={self.cfg.seq_len}")
        # Positions are created on idx's device so no host-to-device copy is needed.
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))
        return logits, loss

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Extend idx (B, T) by max_new_tokens tokens.

        temperature == 0 means greedy decoding (argmax, stays on the device). Otherwise
        tokens are sampled on the CPU with ``generator`` (a CPU generator), so the
        sampled text depends only on the seed and the logits, not on which device's
        random number generator is used.
        """
        for _ in range(max_new_tokens):
            # Only the last seq_len tokens fit the position embedding.
            context = idx[:, -self.cfg.seq_len :]
            logits, _ = self(context)
            logits = logits[:, -1, :]
            if temperature == 0.0:
                next_id = logits.argmax(dim=-1, keepdim=True)
            else:
                probs = F.softmax(logits.float().cpu() / temperature, dim=-1)
                next_id = torch.multinomial(probs, 1, generator=generator).to(idx.device)
            idx = torch.cat([idx, next_id], dim=1)
        return idx
