"""Small models shared by the parallelism workers (built on CPU from a seed, so every
rank and the single-process reference start from the same parameters)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.wq = nn.Linear(dim, dim)
        # No key bias: softmax ignores it, so its gradient would be rounding noise.
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim)
        self.wo = nn.Linear(dim, dim)

    def forward(self, x):
        b, s, _ = x.shape
        # -1: under tensor parallelism each rank holds heads/tp of the heads.
        q = self.wq(x).view(b, s, -1, self.dim_head).transpose(1, 2)
        k = self.wk(x).view(b, s, -1, self.dim_head).transpose(1, 2)
        v = self.wv(x).view(b, s, -1, self.dim_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, s, -1))

    @property
    def dim_head(self):
        return self.wq.in_features // self.heads


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, 4 * dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 64, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def lm_loss(logits, tokens):
    """Next-token cross entropy, averaged over every position."""
    return F.cross_entropy(
        logits[:, :-1].reshape(-1, logits.size(-1)).float(), tokens[:, 1:].reshape(-1)
    )


def tokens_for(step: int, batch: int, seq: int = 12, vocab: int = 64) -> torch.Tensor:
    g = torch.Generator().manual_seed(7919 * step + 1)
    return torch.randint(0, vocab, (batch, seq), generator=g)
