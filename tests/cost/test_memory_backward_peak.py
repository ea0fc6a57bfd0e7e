"""The backward's peak and the loss's fp32 log-softmax under autocast (issue 26), counted by
hand on small graphs, and the logits the extractor attaches to a model's last layer."""

from __future__ import annotations

import pytest

from hetplan.cost.memory import (
    autocast_loss_bytes,
    backward_workspace,
    stage_memory,
    workspace_bound,
)
from hetplan.graph import build_graph
from hetplan.graph.types import LayerInfo
from hetplan.planspec import ModelRef


def _layer(name: str, saved: int, out: int, logits: int = 0) -> LayerInfo:
    return LayerInfo(
        name=name,
        fwd_flops=1.0,
        bwd_flops=2.0,
        params=10,
        param_bytes=20,
        out_bytes=out,
        saved_bytes=saved,
        fwd_io_bytes=0,
        bwd_io_bytes=0,
        loss_logits=logits,
    )


def test_a_large_early_output_is_differentiated_when_little_is_saved() -> None:
    # A VGG's shape: the first layer's output is the largest, its backward runs last.
    layers = [_layer("a", 10, 100), _layer("b", 10, 5), _layer("c", 10, 5)]
    # Peaks by hand (per sample): a: 10 + 2 x 100 = 210; b: 20 + 10 = 30; c: 30 + 10 = 40.
    # All saved: 30. What the backward adds at its peak: 210 - 30 = 180, for 4 samples.
    assert backward_workspace(layers, 4) == 180 * 4
    # The screening's bound, before it knows the stage: two of the largest output.
    assert workspace_bound(layers, 4) == 2 * 100 * 4
    # A stage of the later layers alone: the peak is at its end, two of its last output.
    assert backward_workspace(layers[1:], 4) == 2 * 5 * 4


def test_a_late_large_output_adds_its_two_gradients() -> None:
    # A language model's shape: the head's logits are the largest output, differentiated first.
    layers = [_layer("block", 50, 8), _layer("head", 60, 400)]
    assert backward_workspace(layers, 3) == 2 * 400 * 3


@pytest.mark.parametrize("recompute", [False, True])
def test_the_autocast_loss_is_kept_for_every_micro_batch_in_flight(recompute: bool) -> None:
    layers = [_layer("block", 50, 8), _layer("head", 60, 400, logits=200)]
    # bf16: the trace counted the log-softmax at 2 B per logit; autocast keeps it in fp32 (4 B).
    assert autocast_loss_bytes(layers, "bf16") == 200 * 2
    assert autocast_loss_bytes(layers, "fp32") == 0.0
    m = stage_memory(
        layers,
        micro_batch=3,
        in_flight=5,
        optimizer="sgd",
        dtype="bf16",
        recompute=recompute,
        framework_bytes=0,
    )
    assert m.autocast_loss == 200 * 2 * 3 * 5  # outside the recomputed stage: all 5 kept
    earlier = stage_memory(layers[:1], micro_batch=3, in_flight=5, optimizer="sgd", dtype="bf16")
    assert earlier.autocast_loss == 0.0


def test_the_extractor_marks_the_logits_of_cross_entropy_models() -> None:
    lm = build_graph(ModelRef(name="gpt-tiny", dtype="bf16"))
    head = lm.layers[-1]
    assert head.loss_logits * 2 == head.out_bytes  # bf16: 2 B per logit of the output
    assert all(x.loss_logits == 0 for x in lm.layers[:-1])
    classifier = build_graph(ModelRef(name="resnet-tiny", dataset="cifar10"))
    assert classifier.layers[-1].loss_logits == 10  # CIFAR-10's classes, fp32
