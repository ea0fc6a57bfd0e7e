"""The order that runs is the order that was simulated: on every rank, the executed trace's
compute actions, sends, receives and bucket allreduces come in the order of the predictor's
schedule for the same plan (gpt-tiny, hybrid 2 x 2 and 1F1B with 3 stages, gloo, CPU)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from hetplan.cluster import load_cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.planspec.trace import Span, busy, idle_gaps
from hetplan.predict import predict
from hetplan.run.train import run_plan
from hetplan.schedule.types import Action

CLUSTER = Path(__file__).parents[2] / "examples" / "clusters" / "local-cpu-4on2.yaml"
COMPUTE = ("fwd", "bwd", "optimizer")
Key = tuple[Any, ...]


def _plan(strategy: str, stages: list[list[str]], pipelines: int, batch: int, m: int) -> Plan:
    devs = iter(f"local.{i}" for i in range(4))
    pipes = [
        PipelinePlan(
            stages=[StagePlan(layers=s, devices=[next(devs)]) for s in stages], batch=batch
        )
        for _ in range(pipelines)
    ]
    return Plan(
        model=ModelRef(name="gpt-tiny"),
        strategy=strategy,  # type: ignore[arg-type]
        global_batch=batch * pipelines,
        micro_batches=m,
        pipelines=pipes,
        bucket_mb=0.25,  # several buckets per stage, so that their order is tested
    )


def _simulated(actions: list[Action], dev: str) -> dict[str, list[Key]]:
    return {
        "compute": [(a.kind, a.microbatch, a.part) for a in actions if a.kind in COMPUTE],
        "send": [(a.stage, a.microbatch) for a in actions if a.kind == "send" and a.device == dev],
        "recv": [(a.stage, a.microbatch) for a in actions if a.kind == "send" and a.peer == dev],
        "allreduce": [(a.part,) for a in actions if a.kind == "allreduce"],
    }


def _executed(trace: list[Span]) -> dict[str, list[Key]]:
    order = sorted(range(len(trace)), key=lambda i: (trace[i].start, i))
    rows = [trace[i] for i in order]
    return {
        "compute": [(s.kind, s.microbatch, s.part) for s in rows if s.kind in COMPUTE],
        "send": [(s.stage, s.microbatch) for s in rows if s.kind == "send"],
        "recv": [(s.stage, s.microbatch) for s in rows if s.kind == "recv"],
        "allreduce": [(s.part,) for s in rows if s.kind == "allreduce"],
    }


@pytest.mark.parametrize(
    ("strategy", "pipelines", "m"), [("hybrid", 2, 3), ("1f1b", 1, 4), ("gpipe", 1, 2)]
)
def test_executed_order_equals_simulated_order(strategy: str, pipelines: int, m: int) -> None:
    layers = [layer.name for layer in build_graph("gpt-tiny").layers]
    stages = [layers[:2], layers[2:]] if pipelines == 2 else [layers[:2], layers[2:4], layers[4:]]
    plan = _plan(strategy, stages, pipelines, 6 if pipelines == 2 else 8, m)
    cluster = load_cluster(CLUSTER)
    prediction = predict(plan, build_graph(plan.model), cluster, AnalyticalCompute("fp32"))
    per_device = prediction.timeline.schedule.per_device()
    raw = run_plan(plan, cluster=cluster, steps=1)
    for r in raw:
        dev = r.device
        want = _simulated([a for _, a in per_device[dev]], dev)
        got = _executed(r.actions)
        assert got == want, f"rank {r.rank} ({dev})"
        if pipelines > 1:
            assert len(want["allreduce"]) > 1  # the buckets really are several


def test_spans_add_up_to_the_step() -> None:
    """Every rank's spans lie inside its step, its compute stream runs one action at a time,
    and its compute spans plus the idle gaps between them are exactly the step's time."""
    layers = [layer.name for layer in build_graph("gpt-tiny").layers]
    plan = _plan("1f1b", [layers[:2], layers[2:4], layers[4:]], 1, 8, 4)
    raw = run_plan(plan, cluster=load_cluster(CLUSTER), steps=2)
    for r in raw:
        start, end = r.last_step_start, r.last_step_end
        spans: list[Span] = r.actions
        assert r.timing == "host clock"
        assert r.step_s[-1] == pytest.approx(end - start)
        assert all(start <= s.start <= s.end <= end for s in spans), f"rank {r.rank}"
        compute = sorted((s for s in spans if s.kind in COMPUTE), key=lambda s: s.start)
        assert {s.kind for s in compute} == {"fwd", "bwd", "optimizer"}
        assert all(a.end <= b.start for a, b in itertools.pairwise(compute))
        gaps = idle_gaps(spans, start, end, r.device)
        total = sum(s.duration for s in compute) + sum(g.duration for g in gaps)
        assert total == pytest.approx(end - start, rel=1e-9, abs=1e-9)
        assert busy(spans) == pytest.approx(sum(s.duration for s in compute))
        assert r.forward_s[-1] == pytest.approx(sum(s.duration for s in compute if s.kind == "fwd"))
