"""Per-action spans of a step: the measured timeline (StageClock spans, summarize)."""

from __future__ import annotations

import pytest
import torch

from hetplan.plan.types import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.run.measure import ActionSpan, summarize
from hetplan.run.model import MLPSource
from hetplan.run.timing import StageClock


def test_stage_clock_keeps_one_span_per_micro_batch_in_order() -> None:
    model = MLPSource(widths=(3, 4, 2)).build(0, "cpu")
    clock = StageClock(model, "cpu")
    outs = [model(torch.randn(2, 3)) for _ in range(2)]  # two micro-batches, then backwards
    for out in outs:
        out.sum().backward()
    fwd, bwd = clock.take()
    spans = clock.take_spans()
    assert [(k, mb) for k, mb, _, _ in spans] == [
        ("forward", 0), ("forward", 1), ("backward", 0), ("backward", 1),
    ]  # fmt: skip
    assert all(end >= start for _, _, start, end in spans)
    assert sum(e - s for k, _, s, e in spans if k == "forward") == pytest.approx(fwd)
    assert sum(e - s for k, _, s, e in spans if k == "backward") == pytest.approx(bwd)
    clock.take()
    assert clock.take_spans() == []  # a step without actions


def test_summarize_aligns_spans_on_the_earliest_rank_start() -> None:
    plan = Plan(
        model=ModelRef(name="m"), strategy="dp", global_batch=2,
        pipelines=[PipelinePlan(stages=[StagePlan(layers=["a"], devices=[d])], batch=1)
                   for d in ("x", "y")],
    )  # fmt: skip
    raw = [
        {
            "rank": r, "device": d, "pipeline": r, "stage": 0, "step_s": [1.0],
            "forward_s": [0.1], "backward_s": [0.2], "optimizer_s": [0.0], "loss": [0.5],
            "peak_memory_bytes": 1, "memory_source": "peak RSS",
            "last_step_start": 100.0 + r, "actions": [["forward", 0, 100.5 + r, 100.75 + r]],
        }
        for r, d in enumerate(("x", "y"))
    ]  # fmt: skip
    m = summarize(plan, raw, warmup=0)
    assert m.ranks[0].actions == [ActionSpan(kind="forward", microbatch=0, start=0.5, end=0.75)]
    assert m.ranks[1].actions == [ActionSpan(kind="forward", microbatch=0, start=1.5, end=1.75)]
