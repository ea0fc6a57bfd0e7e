"""The loss backward's fp32 gradients of the logits under autocast (issue 26, item 2), counted
by hand: at log-softmax's backward ``nll_loss``'s fp32 gradient and log-softmax's fp32 gradient
of the logits are both alive, 2 x 4 B per logit, where the workspace counted two gradients of
the head's output in the graph dtype (2 x 2 B per logit in bf16)."""

from __future__ import annotations

import pytest

from hetplan.cost.memory import (
    backward_workspace,
    layer_workspace,
    loss_grad_bytes,
    stage_memory,
    workspace_bound,
)
from hetplan.graph import build_graph
from hetplan.graph.types import LayerInfo
from hetplan.planspec import ModelRef
from hetplan.predict.backward_peak import backward_peak

LOGITS = 200  # per sample


def _layers(elem: int) -> list[LayerInfo]:
    """A block and a head whose output is ``LOGITS`` logits of ``elem`` bytes."""

    def layer(name: str, saved: int, out: int, logits: int = 0) -> LayerInfo:
        return LayerInfo(
            name=name, fwd_flops=1.0, bwd_flops=2.0, params=10, param_bytes=10 * elem,
            param_tensor_bytes=(10 * elem,), out_bytes=out, saved_bytes=saved,
            fwd_io_bytes=0, bwd_io_bytes=0, loss_logits=logits,
        )  # fmt: skip

    return [layer("block", 50, 8), layer("head", 60, LOGITS * elem, logits=LOGITS)]


def test_the_head_holds_both_fp32_gradients_of_the_logits_under_autocast() -> None:
    bf16 = _layers(2)
    # Beyond the two bf16 output gradients (2 x 2 B x 200 = 800): 200 x (8 - 4) = 800.
    assert loss_grad_bytes(bf16[1], "bf16") == 800
    assert loss_grad_bytes(bf16[0], "bf16") == 0.0  # no logits
    # At the head's backward, per sample: the two fp32 gradients, 2 x 4 B x 200 = 1600.
    assert list(layer_workspace(bf16, 1, dtype="bf16")) == [2 * 8, 1600]
    # The head is differentiated first, with everything saved: the workspace is its 1600,
    # for one micro-batch of 3 samples.
    assert backward_workspace(bf16, 3, dtype="bf16") == 1600 * 3
    assert workspace_bound(bf16, 3, dtype="bf16") == 1600 * 3
    # In fp32 there is no cast: the two output gradients are the loss's fp32 gradients, the
    # same 1600 B.
    fp32 = _layers(4)
    assert loss_grad_bytes(fp32[1], "fp32") == 0.0
    assert backward_workspace(fp32, 3, dtype="fp32") == 1600 * 3


@pytest.mark.parametrize("in_flight", [1, 4])
def test_charged_for_the_micro_batch_differentiated_not_every_one_in_flight(
    in_flight: int,
) -> None:
    m = stage_memory(
        _layers(2), micro_batch=3, in_flight=in_flight, optimizer="sgd", dtype="bf16",
        framework_bytes=0,
    )  # fmt: skip
    assert m.backward_workspace == 1600 * 3
    # The saved log-softmax is kept per micro-batch in flight (autocast_loss, 2 B per logit
    # beyond the trace's): the gradients are not.
    assert m.autocast_loss == 200 * 2 * 3 * in_flight


def test_a_flushed_stage_peaks_at_the_heads_backward_with_them() -> None:
    """dp's phase walk (predict/backward_peak.py) takes the workspace from the same count:
    one micro-batch of 3, the head's backward, everything saved (110 B per sample)."""
    layers = _layers(2)
    mem = stage_memory(
        layers, micro_batch=3, in_flight=1, optimizer="sgd", dtype="bf16", framework_bytes=0
    )
    peak = backward_peak(
        mem, layers, micro_batch=3, micro_batches=1, optimizer="sgd", dtype="bf16", tp=1,
        bucket_cap_bytes=25e6,
    )  # fmt: skip
    assert peak.backward_workspace == 1600 * 3
    assert peak.activations == 110 * 3


def test_gpt2s_loss_gradient_is_one_fp32_logits_buffer_per_sample() -> None:
    """GPT-2: 1024 positions x 50257 tokens x 4 B = 206 MB per sample beyond the bf16
    workspace (issue 26)."""
    head = build_graph(ModelRef(name="gpt2", dtype="bf16")).layers[-1]
    assert head.loss_logits == 1024 * 50257
    assert loss_grad_bytes(head, "bf16") == 1024 * 50257 * 4
