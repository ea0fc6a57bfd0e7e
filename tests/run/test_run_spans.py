"""Per-action spans of a step: the measured timeline (the executor's trace, summarize)."""

from __future__ import annotations

from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.planspec.trace import Span
from hetplan.run.loop.job import RankResult
from hetplan.run.measurement.measure import summarize


def test_summarize_aligns_spans_on_the_earliest_rank_start() -> None:
    plan = Plan(
        model=ModelRef(name="m"), strategy="dp", global_batch=2,
        pipelines=[PipelinePlan(stages=[StagePlan(layers=["a"], devices=[d])], batch=1)
                   for d in ("x", "y")],
    )  # fmt: skip
    raw = [
        RankResult(
            rank=r, device=d, pipeline=r, stage=0, step_s=[1.0],
            forward_s=[0.1], backward_s=[0.2], optimizer_s=[0.0], loss=[0.5],
            peak_memory_bytes=1, memory_source="peak RSS",
            last_step_start=100.0 + r, last_step_end=101.0 + r, timing="host clock",
            actions=[Span(device=d, kind="fwd", stage=0, microbatch=0, start=100.5 + r,
                          end=100.75 + r)],
        )
        for r, d in enumerate(("x", "y"))
    ]  # fmt: skip
    m = summarize(plan, raw, warmup=0)
    assert m.ranks[0].actions == [
        Span(device="x", kind="fwd", stage=0, microbatch=0, start=0.5, end=0.75)
    ]
    assert m.ranks[1].actions == [
        Span(device="y", kind="fwd", stage=0, microbatch=0, start=1.5, end=1.75)
    ]
    assert [r.last_step for r in m.ranks] == [(0.0, 1.0), (1.0, 2.0)]
    assert {r.timing for r in m.ranks} == {"host clock"}
