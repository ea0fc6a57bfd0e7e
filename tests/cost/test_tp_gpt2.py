"""GPT-2 at tp = 2: the TP all-reduces counted by hand from the model's configuration equal
what the cost model (``cost.tp.tp_traffic``) and the priced plan (``predict.price``) bill.

GPT-2 (the zoo's ``gpt2``): 12 blocks, hidden h = 768, 1024 tokens per sample, vocabulary
50257. Per TP rank and micro-batch of b samples (s = 1024 tokens), Megatron-LM's layout
(Shoeybi et al. 2019, Sec. 3) as hetplan's runtime runs it:

* each block (attention + MLP): 2 forward all-reduces of b*s*h elements in the compute dtype
  and 2 backward of b*s*h fp32;
* a vocabulary-split embedding: 1 forward all-reduce of b*s*h fp32, nothing backward;
* a vocabulary-split head with ``loss_parallel``: 3 forward all-reduces of one fp32 value per
  token (b*s each) and 1 backward of b*s*h fp32; never the logits (b*s*V).

The vocabulary splits only when tp divides it: 50257 is odd, so at tp = 2 the zoo's gpt2 keeps
its embedding and head whole on every rank (no TP communication for them, as the runtime does
it); Megatron-LM pads GPT-2's vocabulary to 50304 (a multiple of 128) for this, which
``gpt2:vocab=50304`` builds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hetplan.cluster import load_cluster
from hetplan.cost.comm import allreduce_time
from hetplan.cost.compute import AnalyticalCompute
from hetplan.cost.tp import tp_comm_times, tp_traffic
from hetplan.graph import build_graph
from hetplan.graph.types import ModelGraph
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.predict.check import stage_ranges
from hetplan.predict.price import price

CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "homogeneous-4gpu.yaml"
BLOCKS, H, S, V = 12, 768, 1024, 50257  # gpt2's configuration (hetplan models)
PADDED_V = 50304  # Megatron-LM's padded GPT-2 vocabulary: 393 x 128
TP = 2
B = 2  # samples per micro-batch
ELEM_BYTES = {"fp32": 4, "bf16": 2}  # bytes per element of the compute dtype
FP32 = 4  # bytes: backward all-reduces, the embedding's output and loss_parallel's values


def hand_count(dtype: str, vocab_split: bool) -> dict[str, tuple[float, float]]:
    """(forward, backward) bytes per TP rank and micro-batch: the embedding, all blocks, the
    head, counted from the configuration."""
    act = B * S * H  # elements of one b x s x h all-reduce
    # Per block: forward the attention's and the MLP's outputs; backward the input gradient of
    # each Linear split by output features (q, k, v, up: ColwiseParallel reduces each).
    blocks = (BLOCKS * 2 * act * ELEM_BYTES[dtype], BLOCKS * 4 * act * FP32)
    if not vocab_split:
        return {"embed": (0.0, 0.0), "blocks": blocks, "head": (0.0, 0.0)}
    return {
        "embed": (act * FP32, 0.0),
        "blocks": blocks,
        "head": (3 * B * S * FP32, act * FP32),
    }


def billed(graph: ModelGraph) -> dict[str, tuple[float, float]]:
    """What ``cost.tp.tp_traffic`` bills, summed over the embedding, the blocks, the head."""
    out = {"embed": (0.0, 0.0), "blocks": (0.0, 0.0), "head": (0.0, 0.0)}
    for layer in graph.layers:
        part = layer.name if layer.name in ("embed", "head") else "blocks"
        t = tp_traffic(layer, B, graph.dtype, TP)
        fwd, bwd = out[part]
        out[part] = (fwd + sum(t.fwd), bwd + sum(t.bwd))
    return out


def two_stage_plan(graph: ModelGraph) -> Plan:
    """GPipe, 2 stages of 2 TP ranks (embedding + 6 blocks, 6 blocks + head), micro-batch B."""
    names = [x.name for x in graph.layers]
    half = 1 + BLOCKS // 2
    devices = [d.id for d in load_cluster(CLUSTER).devices]
    stages = [
        StagePlan(layers=names[:half], devices=devices[:2]),
        StagePlan(layers=names[half:], devices=devices[2:]),
    ]
    return Plan(
        model=ModelRef(name=graph.name, dtype=graph.dtype),
        strategy="gpipe",
        global_batch=2 * B,
        micro_batches=2,
        pipelines=[PipelinePlan(stages=stages, batch=2 * B)],
        tp=TP,
    )


def priced_bytes(graph: ModelGraph) -> list[tuple[float, float]]:
    """Per stage, the TP bytes of predict's priced plan."""
    plan = two_stage_plan(graph)
    cluster = load_cluster(CLUSTER)
    priced = price(plan, graph, cluster, AnalyticalCompute(), stage_ranges(plan, graph))
    assert priced.micro_batch == [B]
    return priced.tp_bytes[0]


def check(graph: ModelGraph, vocab_split: bool) -> None:
    want = hand_count(graph.dtype, vocab_split)
    assert billed(graph) == want
    embed, blocks, head = want["embed"], want["blocks"], want["head"]
    # Stage 0: the embedding and the first 6 blocks; stage 1: 6 blocks and the head.
    half = (blocks[0] / 2, blocks[1] / 2)
    assert priced_bytes(graph) == [
        (embed[0] + half[0], embed[1] + half[1]),
        (half[0] + head[0], half[1] + head[1]),
    ]


def test_gpt2_blocks_by_hand_and_its_odd_vocabulary_replicated() -> None:
    graph = build_graph("gpt2")
    assert (graph.layers[0].tp_split, graph.layers[-1].tp_split) == (V, V)
    assert V % TP == 1  # 50257 rows do not split in two: embedding and head stay whole
    check(graph, vocab_split=False)


def test_gpt2_padded_vocabulary_by_hand_bf16() -> None:
    graph = build_graph(f"gpt2:vocab={PADDED_V}", dtype="bf16")
    assert PADDED_V % TP == 0
    check(graph, vocab_split=True)
    # loss_parallel: the head all-reduces a few values per token and its input gradient, under
    # 1/30 of the blocks' traffic; the b x s x V fp32 logits (what the old model billed) would
    # be more than all 12 blocks' together.
    want = hand_count("bf16", vocab_split=True)
    head, blocks = sum(want["head"]), sum(want["blocks"])
    assert head < blocks / 30
    assert blocks < B * S * PADDED_V * FP32


def test_gpt2_tp_times_are_the_hand_counted_allreduces() -> None:
    """The seconds predict adds to a TP stage are those all-reduces on the TP group's link."""
    graph = build_graph(f"gpt2:vocab={PADDED_V}")
    cluster = load_cluster(CLUSTER)
    group = [d.id for d in cluster.devices][:TP]
    fwd, bwd = tp_comm_times(graph.layers, B, graph.dtype, group, cluster)
    act = allreduce_time(B * S * H * FP32, group, cluster)
    stat = allreduce_time(B * S * FP32, group, cluster)
    assert fwd == pytest.approx([act] + [2 * act] * BLOCKS + [3 * stat])
    assert bwd == pytest.approx([0.0] + [4 * act] * BLOCKS + [act])
