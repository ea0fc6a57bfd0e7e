"""Models whose forward is not a chain of children (loaded as ``file.py:function``)."""

from __future__ import annotations

import torch
from torch import nn

WIDTH = 8
CLASSES = 4
VOCAB = 11
SEQ = 5


class Skip(nn.Module):
    """``head(l3(l2(l1(x))) + x)``: the input skips three layers."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(WIDTH, WIDTH)
        self.l2 = nn.Linear(WIDTH, WIDTH)
        self.l3 = nn.Linear(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.l3(self.l2(self.l1(x)))) + x)


class Reused(nn.Module):
    """``l1`` runs first and again after ``l2``: its weight is read by two stages."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(WIDTH, WIDTH)
        self.l2 = nn.Linear(WIDTH, WIDTH)
        self.act = nn.Tanh()
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.l1(x))
        h = self.act(self.l2(h))
        return self.head(self.act(self.l1(h)))


class Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(WIDTH, WIDTH)
        self.b = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.tanh(self.a(x)), torch.sigmoid(self.b(x))


class Gate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.h = nn.Linear(WIDTH, WIDTH)
        self.g = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"h": torch.tanh(self.h(x)), "g": self.g(x)}


class TupleDict(nn.Module):
    """Layers whose outputs are a tuple and a dict, consumed later by glue code."""

    def __init__(self) -> None:
        super().__init__()
        self.pair = Pair()
        self.mix = nn.Linear(WIDTH, WIDTH)
        self.gate = Gate()
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.pair(x)
        m = self.mix(a * b)
        d = self.gate(m + b)
        return self.head(d["h"] * torch.sigmoid(d["g"]) + a)


class TiedLM(nn.Module):
    """A language model whose output projection is its embedding (tied, as GPT-2's)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.mid = nn.Linear(WIDTH, WIDTH)
        self.norm = nn.LayerNorm(WIDTH)
        self.out = nn.Linear(WIDTH, VOCAB, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.emb(idx)
        return self.out(self.norm(torch.tanh(self.mid(h)) + h))


def skip() -> tuple[nn.Module, tuple[int, ...]]:
    return Skip(), (WIDTH,)


def reused() -> tuple[nn.Module, tuple[int, ...]]:
    return Reused(), (WIDTH,)


def tuple_dict() -> tuple[nn.Module, tuple[int, ...]]:
    return TupleDict(), (WIDTH,)


def tied_lm() -> tuple[nn.Module, torch.Tensor]:
    return TiedLM(), torch.zeros(2, SEQ, dtype=torch.long)


class TopLevel(nn.Module):
    """A parameter outside every layer, read by glue code (as a ViT's position embedding),
    and a forward argument with a default value."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(WIDTH, WIDTH)
        self.l2 = nn.Linear(WIDTH, WIDTH)
        self.pos = nn.Parameter(torch.linspace(-1.0, 1.0, WIDTH))
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
        h = torch.tanh(self.l1(x)) + self.pos * scale
        return self.head(torch.tanh(self.l2(h)) + self.pos)


def top_level() -> tuple[nn.Module, tuple[int, ...]]:
    return TopLevel(), (WIDTH,)
