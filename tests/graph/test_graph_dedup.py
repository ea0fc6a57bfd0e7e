"""Deduplicated tracing (stand-ins for identical layers) gives exactly the full trace's graph."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from torch import nn

from hetplan.graph import BuiltModel, resolve_model
from hetplan.graph import extract as extract_mod
from hetplan.graph.extract import trace_graph
from hetplan.graph.meta import build_on_meta
from hetplan.graph.signature import layer_signature, stand_in_candidates
from hetplan.graph.trace import TraceState
from hetplan.graph.types import ModelGraph

F = 8


@pytest.fixture
def copies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Number of layers whose figures were copied, per trace (spies on trace_step)."""
    seen: list[int] = []
    real = extract_mod.trace_step

    def spy(*args: Any, **kwargs: Any) -> TraceState:
        state = real(*args, **kwargs)
        seen.append(len(state.copied))
        return state

    monkeypatch.setattr(extract_mod, "trace_step", spy)
    return seen


def assert_same(full: ModelGraph, dedup: ModelGraph) -> None:
    for f in dataclasses.fields(ModelGraph):
        if f.name != "layers":
            assert getattr(dedup, f.name) == getattr(full, f.name), f.name
    assert len(dedup.layers) == len(full.layers)
    for a, b in zip(full.layers, dedup.layers, strict=True):
        for f in dataclasses.fields(a):
            assert getattr(b, f.name) == getattr(a, f.name), (a.name, f.name)


@pytest.mark.parametrize(
    ("name", "dataset", "copied"),
    [
        ("gpt-tiny", None, 1),  # embed, block0..3, head: block2 stands in
        ("bert-tiny:layers=6", None, 3),  # blocks 2..4
        ("resnet50", "cifar10", 2),  # layer3_3, layer3_4 (layer3_1..5 are identical)
    ],
)
def test_dedup_equals_full_trace(
    name: str, dataset: str | None, copied: int, copies: list[int]
) -> None:
    built = resolve_model(name, dataset)
    dedup = trace_graph(built, dedup=True)
    full = trace_graph(built, dedup=False)
    assert copies == [copied, 0]
    assert_same(full, dedup)


class Block(nn.Module):
    def __init__(self, leak: bool = False) -> None:
        super().__init__()
        self.lin = nn.Linear(F, F)
        self.leak = leak
        self.kept: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.lin(x))
        if self.leak:
            self.kept = h  # read again by the model after every block ran
        return x + h


class Chain(nn.Module):
    """Six identical blocks with optional glue code, an outside tensor or a leak."""

    def __init__(self, glue: bool = False, outside: bool = False, leak: bool = False) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(leak) for _ in range(6))
        self.glue, self.outside, self.leak = glue, outside, leak
        self.side: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, block in enumerate(self.blocks):
            x = block(x)
            if self.glue and i == 3:
                x = x * 2
        if self.outside:
            x = x + self.blocks[3].lin(x)
        if self.leak:
            kept = self.blocks[3].kept
            assert kept is not None
            x = x + kept
        return x


def chain_model(**opts: bool) -> BuiltModel:
    return BuiltModel(
        name="chain",
        family="custom",
        dataset=None,
        factory=lambda: Chain(**opts),
        input_shape=(F,),
        input_dtype=torch.float32,
        task="regress",
        target_shape=(F,),
        default_depth=2,
    )


@pytest.mark.parametrize(
    ("opts", "copied"),
    [
        ({}, 3),  # blocks.2..4 stand in
        ({"glue": True}, 0),  # glue after blocks.3 (a stand-in): traced again in full
        ({"leak": True}, 0),  # a template's inner tensor is read later: traced again
        ({"outside": True}, 0),  # blocks.3's weights are used outside it: traced again
    ],
)
def test_dedup_is_exact_or_falls_back(
    opts: dict[str, bool], copied: int, copies: list[int]
) -> None:
    built = chain_model(**opts)
    dedup = trace_graph(built, dedup=True)
    full = trace_graph(built, dedup=False)
    assert_same(full, dedup)
    assert copies[0] == copied


def test_signature_sees_attributes_hooks_and_shapes() -> None:
    class Heads(nn.Module):
        def __init__(self, heads: int, width: int = F) -> None:
            super().__init__()
            self.heads = heads
            self.lin = nn.Linear(width, width)

    assert layer_signature(Heads(2)) == layer_signature(Heads(2))
    assert layer_signature(Heads(2)) != layer_signature(Heads(4))  # not in repr
    assert layer_signature(Heads(2)) != layer_signature(Heads(2, width=4))
    hooked = Heads(2)
    hooked.lin.register_forward_hook(lambda *_: None)
    assert layer_signature(hooked) is None
    sigs = ["a", "b", "b", "b", "b", "b", "c"]
    assert stand_in_candidates(list(sigs)) == {3, 4}  # two traced before, one after


def test_build_on_meta_skips_init_only() -> None:
    def make() -> nn.Module:
        m = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
        nn.init.trunc_normal_(m[0].weight)
        return m

    fast = build_on_meta(make)
    with torch.device("meta"):
        slow = make()
    shapes = [(n, p.shape, p.dtype, p.device.type) for n, p in fast.named_parameters()]
    assert shapes == [(n, p.shape, p.dtype, p.device.type) for n, p in slow.named_parameters()]
    assert all(p.is_meta for p in fast.parameters())
    assert torch.ones(2).add_(1).tolist() == [2.0, 2.0]  # no mode left behind
