"""Per-operation-class work of each layer (``LayerInfo.work``) adds up to the layer's totals."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from torch import nn

from hetplan.graph import BuiltModel, build_graph, cache, resolve_model
from hetplan.graph import extract as extract_mod
from hetplan.graph.extract import trace_graph
from hetplan.graph.ops import CAUSAL_ATTENTION_SHARE
from hetplan.graph.types import OP_CLASSES, LayerInfo, ModelGraph
from hetplan.graph.zoo.bert import BERT_CONFIGS
from hetplan.graph.zoo.gpt import GPT_CONFIGS
from hetplan.serde import from_data, to_data

IO_ROUNDING = 1.0
"""Bytes: ``fwd_io_bytes``/``bwd_io_bytes`` are rounded up to whole bytes per sample, the
per-class I/O bytes are not (extract._op_work)."""


def _mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


MLP = BuiltModel(
    name="mlp",
    family="custom",
    dataset=None,
    factory=_mlp,
    input_shape=(16,),
    input_dtype=torch.float32,
    task="regress",
    target_shape=(4,),
    default_depth=1,
)

MODELS = {
    "mlp": MLP,
    "resnet-tiny": resolve_model("resnet-tiny", "cifar10"),
    "mobilenetv2": resolve_model("mobilenetv2", "cifar10"),
    "gpt-tiny": resolve_model("gpt-tiny"),
    "bert-tiny": resolve_model("bert-tiny"),
}
CLASSES = {
    "mlp": {"matmul", "memory"},
    "resnet-tiny": {"conv", "matmul", "memory"},
    "mobilenetv2": {"conv", "conv_grouped", "matmul", "memory"},
    "gpt-tiny": {"attention", "matmul", "memory"},
    "bert-tiny": {"attention", "matmul", "memory"},
}


@pytest.fixture(scope="module")
def graphs() -> dict[str, ModelGraph]:
    return {name: trace_graph(built) for name, built in MODELS.items()}


def _check_pass(layer: LayerInfo, backward: bool) -> None:
    work = [w for w in layer.work if w.backward == backward]
    flops, conv, io, kernels = (
        (layer.bwd_flops, layer.bwd_conv_flops, layer.bwd_io_bytes, layer.bwd_kernels)
        if backward
        else (layer.fwd_flops, layer.fwd_conv_flops, layer.fwd_io_bytes, layer.fwd_kernels)
    )
    assert sum(w.flops for w in work) == pytest.approx(flops, rel=1e-12, abs=0)
    convs = sum(w.flops for w in work if w.op_class in ("conv", "conv_grouped"))
    assert convs == pytest.approx(conv, rel=1e-12, abs=0)
    assert sum(w.io_bytes for w in work) == pytest.approx(io, rel=0, abs=IO_ROUNDING)
    assert sum(w.kernels for w in work) == kernels


@pytest.mark.parametrize("name", MODELS)
def test_work_adds_up_to_layer_totals(name: str, graphs: dict[str, ModelGraph]) -> None:
    for layer in graphs[name].layers:
        keys = [(w.op_class, w.backward) for w in layer.work]
        assert len(keys) == len(set(keys)), layer.name  # one entry per class and pass
        assert all(w.op_class in OP_CLASSES for w in layer.work)
        assert all(w.kernels or w.flops for w in layer.work)  # empty classes left out
        assert all(w.flops == 0 for w in layer.work if w.op_class == "memory")
        _check_pass(layer, backward=False)
        _check_pass(layer, backward=True)


@pytest.mark.parametrize("name", MODELS)
def test_expected_classes_are_present(name: str, graphs: dict[str, ModelGraph]) -> None:
    found = {w.op_class for layer in graphs[name].layers for w in layer.work}
    assert found == CLASSES[name]


def test_mlp_work_by_hand(graphs: dict[str, ModelGraph]) -> None:
    first, relu, last = graphs["mlp"].layers
    (fwd_mm, bwd_mm) = [w for w in first.work if w.op_class == "matmul"]
    assert fwd_mm.flops == 2 * 16 * 32 and fwd_mm.kernels == 1  # one addmm
    assert bwd_mm.flops == 2 * 16 * 32  # weight gradient only: the input is data
    assert bwd_mm.io_bytes == 4 * (32 + 16)  # reads grad_out and the input (the grad is a weight's)
    assert {w.op_class for w in relu.work} == {"memory"}
    assert relu.work[0].io_bytes == 4 * (32 + 32)  # relu reads 32 floats and writes 32
    assert sum(w.flops for w in last.work if w.backward) == 2 * (2 * 32 * 4)


def test_dedup_copies_work_of_identical_layers() -> None:
    built = resolve_model("gpt-tiny")
    dedup = trace_graph(built, dedup=True)
    full = trace_graph(built, dedup=False)
    blocks = [layer for layer in dedup.layers if layer.name.startswith("block")]
    assert all(layer.work == blocks[0].work for layer in blocks)
    assert [layer.work for layer in dedup.layers] == [layer.work for layer in full.layers]


def test_work_round_trips_through_serde_and_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, graphs: dict[str, ModelGraph]
) -> None:
    graph = graphs["mobilenetv2"]
    assert from_data(ModelGraph, to_data(graph), "mem") == graph
    monkeypatch.setenv(cache.CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(cache.NO_CACHE_ENV, raising=False)
    extract_mod._cached_graph.cache_clear()
    try:
        stored = build_graph("mobilenetv2", "cifar10")
        extract_mod._cached_graph.cache_clear()
        key = cache.cache_key("mobilenetv2", "cifar10", None, 2, "fp32")
        loaded = cache.load(key)
    finally:
        extract_mod._cached_graph.cache_clear()
    assert loaded is not None
    assert [x.work for x in loaded.layers] == [x.work for x in stored.layers]
    assert [x.work for x in loaded.layers] == [x.work for x in graph.layers]
    assert any(w.op_class == "conv_grouped" for x in loaded.layers for w in x.work)


def test_old_layer_json_loads_without_work() -> None:
    layer = dataclasses.replace(
        build_graph("resnet-tiny", "cifar10").layers[0], work=()
    )  # a graph cached before LayerInfo.work
    data = to_data(layer)
    del data["work"]
    assert from_data(LayerInfo, data, "old.json").work == ()


@pytest.mark.parametrize(
    ("name", "share"), [("gpt-tiny", CAUSAL_ATTENTION_SHARE), ("bert-tiny", 1)]
)
def test_causal_attention_counts_half_the_score_matrix(
    name: str, share: float, graphs: dict[str, ModelGraph]
) -> None:
    """Hand count per sample, forward: QK^T and PV, 2 T^2 d FLOPs each over all heads (d the
    model width); gpt-tiny's attention is causal (its kernel skips the tiles above the
    diagonal), bert-tiny's is not. Backward is torch's 2.5 times the forward."""
    cfg = {**GPT_CONFIGS, **BERT_CONFIGS}[name]
    full = 4.0 * cfg.seq**2 * cfg.hidden
    for layer in graphs[name].layers[1 : 1 + cfg.layers]:
        attn = {w.backward: w.flops for w in layer.work if w.op_class == "attention"}
        assert attn[False] == pytest.approx(share * full, rel=1e-9)
        assert attn[True] == pytest.approx(2.5 * share * full, rel=1e-9)
