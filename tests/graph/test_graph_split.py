"""The values a stage sends are the ones the graph prices: for every cut of a model, the bytes
crossing it in the split program (run on the meta device) equal ``graph.cut_bytes``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hetplan.graph import build_graph, resolve_model
from hetplan.graph.meta import build_on_meta
from hetplan.graph.split import split_program, values_of

MODELS = Path(__file__).resolve().parents[1] / "run" / "fidelity_models.py"
BATCH = 2


def _crossing_bytes(name: str, depth: int | None) -> tuple[list[int], list[int]]:
    built = resolve_model(name, None)
    graph = build_graph(name, depth=depth)
    layers = [layer.name for layer in graph.layers]
    model = build_on_meta(built.factory).train()
    x = torch.empty((BATCH, *built.input_shape), dtype=built.input_dtype, device="meta")
    got = []
    for k in range(len(layers) - 1):
        split = split_program(model, [layers[: k + 1], layers[k + 1 :]])
        out = split.stages[0].module(x)
        got.append(sum(t.nbytes for t in values_of(out)) // BATCH)
    return got, list(graph.cut_bytes)


@pytest.mark.parametrize(
    ("name", "depth"),
    [
        (f"{MODELS}:skip", None),
        (f"{MODELS}:reused", None),
        (f"{MODELS}:tuple_dict", None),
        (f"{MODELS}:tied_lm", None),
        ("gpt-tiny", None),
        ("gpt-tiny", 2),
        ("resnet-tiny", 2),
        ("bert-tiny", 2),
    ],
)
def test_sent_bytes_equal_priced_cut_bytes(name: str, depth: int | None) -> None:
    got, priced = _crossing_bytes(name, depth)
    assert got == priced


def test_skip_connection_crosses_every_cut() -> None:
    got, _ = _crossing_bytes(f"{MODELS}:skip", None)
    width = 8 * 4  # the input (8 fp32 features) travels with the activation to the add
    assert got == [2 * width, 2 * width, 8 * 4]


def test_tied_output_projection_counts_its_shared_weight() -> None:
    graph = build_graph(f"{MODELS}:tied_lm")
    by_name = {layer.name: layer for layer in graph.layers}
    vocab, width = 11, 8  # fidelity_models.VOCAB, WIDTH
    assert by_name["emb"].params == vocab * width and by_name["emb"].shared_params == 0
    assert by_name["out"].params == 0 and by_name["out"].shared_params == vocab * width
