"""GPT-2 style decoder (nanoGPT layout with separate q/k/v projections; Radford et al. 2019),
tied token embeddings.

Top level: ``embed`` (token + position embeddings + dropout), ``block0``..``block{L-1}``,
``head`` (final layer norm + language-model head). ``forward`` returns logits (B, T, V); the
loss is computed outside. ``head.lm_head.weight`` *is* ``embed.wte.weight`` (tied); a pipeline
split that places them on different stages keeps separate copies, so parameter totals count the
tied matrix once (in ``embed``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812


@dataclass(frozen=True)
class TransformerConfig:
    """Shape of a GPT or BERT model; every field is an option in ``name:key=value,...``."""

    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int

    def __post_init__(self) -> None:
        if min(self.layers, self.hidden, self.heads, self.seq, self.vocab) < 1:
            raise ValueError(f"every transformer option must be >= 1, got {self}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads})")


GPT_CONFIGS: dict[str, TransformerConfig] = {
    "gpt2": TransformerConfig(12, 768, 12, 1024, 50257),
    "gpt2-medium": TransformerConfig(24, 1024, 16, 1024, 50257),
    "gpt2-large": TransformerConfig(36, 1280, 20, 1024, 50257),
    "gpt2-xl": TransformerConfig(48, 1600, 25, 1024, 50257),
    "gpt": TransformerConfig(12, 768, 12, 1024, 50257),
    "gpt-tiny": TransformerConfig(4, 128, 4, 64, 1000),
    "gpt-mini": TransformerConfig(6, 256, 8, 128, 1000),
}

INIT_STD = 0.02
"""Weight init standard deviation (GPT-2 paper / nanoGPT)."""


class CausalSelfAttention(nn.Module):  # type: ignore[misc]
    """Multi-head causal self-attention with separate ``q``, ``k`` and ``v`` projections.

    The projections are three Linears, not one fused ``3 * hidden`` Linear, and the forward
    takes the head count from the projections' output width (``head_dim`` is fixed): a module
    whose Linears are split Megatron-style (``q``/``k``/``v`` by output features, ``c_proj`` by
    input features, :mod:`hetplan.graph.tp_units`) then runs its local ``hidden / tp /
    head_dim`` heads unchanged. Same FLOPs and parameters as the fused projection.
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.head_dim = cfg.hidden // cfg.heads
        self.q = nn.Linear(cfg.hidden, cfg.hidden)
        self.k = nn.Linear(cfg.hidden, cfg.hidden)
        self.v = nn.Linear(cfg.hidden, cfg.hidden)
        self.c_proj = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (
            proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
            for proj in (self.q, self.k, self.v)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out: torch.Tensor = self.c_proj(y.transpose(1, 2).reshape(b, t, -1))
        return out


class Block(nn.Module):  # type: ignore[misc]
    """Pre-norm transformer block."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.hidden)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.hidden)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.hidden, 4 * cfg.hidden), nn.GELU(), nn.Linear(4 * cfg.hidden, cfg.hidden)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        out: torch.Tensor = x + self.mlp(self.ln_2(x))
        return out


class Embed(nn.Module):  # type: ignore[misc]
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab, cfg.hidden)
        self.wpe = nn.Embedding(cfg.seq, cfg.hidden)
        self.drop = nn.Dropout(0.0)  # 0 keeps pipeline and single-process runs comparable

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        out: torch.Tensor = self.drop(self.wte(idx) + self.wpe(pos))
        return out


class LMHead(nn.Module):  # type: ignore[misc]
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.ln_f = nn.LayerNorm(cfg.hidden)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.lm_head(self.ln_f(x))
        return out


class GPT(nn.Sequential):  # type: ignore[misc]
    """GPT-2 as a sequence of ``embed``, ``block{i}``, ``head``."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.add_module("embed", Embed(cfg))
        for i in range(cfg.layers):
            self.add_module(f"block{i}", Block(cfg))
        self.add_module("head", LMHead(cfg))
        self.apply(_init_weights)
        self.head.lm_head.weight = self.embed.wte.weight  # tied (GPT-2)


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
