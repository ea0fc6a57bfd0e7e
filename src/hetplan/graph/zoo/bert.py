"""BERT-style encoder (Devlin et al. 2019) with a sequence-classification head.

Top level: ``embed`` (word + position + token-type embeddings, layer norm, dropout),
``layer0``..``layer{L-1}`` (post-norm encoder blocks), ``head`` (tanh pooler on the first token +
linear classifier). BERT-base is 109.5M parameters including embeddings and pooler.
"""

from __future__ import annotations

import torch
from torch import nn

from hetplan.graph.zoo.gpt import TransformerConfig

BERT_CONFIGS: dict[str, TransformerConfig] = {
    "bert-base": TransformerConfig(12, 768, 12, 512, 30522),
    "bert-large": TransformerConfig(24, 1024, 16, 512, 30522),
    "bert-tiny": TransformerConfig(2, 128, 2, 128, 30522),
}

BERT_CLASSES = 2
"""Classes of the classification head (a binary task such as SST-2)."""


class BertEmbed(nn.Module):  # type: ignore[misc]
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.word = nn.Embedding(cfg.vocab, cfg.hidden)
        self.position = nn.Embedding(cfg.seq, cfg.hidden)
        self.token_type = nn.Embedding(2, cfg.hidden)
        self.norm = nn.LayerNorm(cfg.hidden)
        self.drop = nn.Dropout(0.0)  # 0 keeps pipeline and single-process runs comparable

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.word(idx) + self.position(pos) + self.token_type(torch.zeros_like(idx))
        out: torch.Tensor = self.drop(self.norm(x))
        return out


class EncoderLayer(nn.Module):  # type: ignore[misc]
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(cfg.hidden, cfg.heads, batch_first=True)
        self.norm1 = nn.LayerNorm(cfg.hidden)
        self.ffn = nn.Sequential(
            nn.Linear(cfg.hidden, 4 * cfg.hidden), nn.GELU(), nn.Linear(4 * cfg.hidden, cfg.hidden)
        )
        self.norm2 = nn.LayerNorm(cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attn(x, x, x, need_weights=False)[0])
        out: torch.Tensor = self.norm2(x + self.ffn(x))
        return out


class Pooler(nn.Module):  # type: ignore[misc]
    def __init__(self, cfg: TransformerConfig, classes: int) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden, cfg.hidden)
        self.classifier = nn.Linear(cfg.hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.classifier(torch.tanh(self.dense(x[:, 0])))
        return out


class Bert(nn.Sequential):  # type: ignore[misc]
    def __init__(self, cfg: TransformerConfig, classes: int = BERT_CLASSES) -> None:
        super().__init__()
        self.add_module("embed", BertEmbed(cfg))
        for i in range(cfg.layers):
            self.add_module(f"layer{i}", EncoderLayer(cfg))
        self.add_module("head", Pooler(cfg, classes))
