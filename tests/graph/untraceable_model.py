"""A small GPT-like model whose attention torch.fx cannot trace: ``self.mask[:s, :s]`` slices
the causal mask by the traced sequence length (issue 30, item 5). ``model`` returns it with a
batch of token ids, for ``hetplan inspect tests/graph/untraceable_model.py:model``."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

WIDTH, HEADS, TOKENS, VOCAB = 64, 4, 32, 100


class Attn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(WIDTH, WIDTH) for _ in range(4))
        self.register_buffer("mask", torch.tril(torch.ones(TOKENS, TOKENS)).bool())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = (
            p(x).view(b, s, HEADS, d // HEADS).transpose(1, 2) for p in (self.q, self.k, self.v)
        )
        # fx: `s` is a Proxy here, and a Proxy is no slice index (TypeError)
        att = (q @ k.transpose(-1, -2)).masked_fill(~self.mask[:s, :s], float("-inf"))
        return self.o((F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.attn = Attn()
        self.up, self.down = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.block0, self.block1 = Block(), Block()
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block1(self.block0(self.emb(x))))


def model() -> tuple[nn.Module, torch.Tensor]:
    return Net(), torch.randint(0, VOCAB, (2, TOKENS))
