"""Two ``hetplan train`` runs of the same plan on an unchanged machine leave its prediction
steady: write-back is on by default, so the planner must not flip between runs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from train_helpers import train_until_written
from writeback_helpers import LOCAL

from hetplan.cluster import load_cluster
from hetplan.graph import build_graph
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.predict import predict
from hetplan.profile.select import compute_model
from hetplan.profile.store import load_profiles
from hetplan.run.measurement.writeback_gate import MAX_STEP_SPREAD

STEADY = MAX_STEP_SPREAD - 1
"""Largest relative move of the prediction after a second run: two runs the gate accepts each
spread by at most :data:`MAX_STEP_SPREAD` (p90/p10), so a busy machine (CI runs two test
workers on two cores) may move their medians that far, but not the 2-4.6x jumps the store made
before the gate (issue 24). The 10% steadiness on a quiet machine is a benchmark figure
(docs/benchmarks.md), not a unit-test bound: one CI run moved 11.4%."""


def one_f_one_b() -> Plan:
    """gpt-tiny in two stages on local.0 and local.1, 4 micro-batches of 2 samples."""
    stages = [
        StagePlan(layers=["embed", "block0", "block1"], devices=["local.0"]),
        StagePlan(layers=["block2", "block3", "head"], devices=["local.1"]),
    ]
    return Plan(
        model=ModelRef(name="gpt-tiny"), strategy="1f1b", global_batch=8, micro_batches=4,
        pipelines=[PipelinePlan(batch=8, stages=stages)],
    )  # fmt: skip


@pytest.mark.slow  # two real 2-rank runs of 35 short steps (more if busy): about 20 s on 2 cores
def test_two_runs_leave_the_prediction_of_a_pipelined_plan_within_the_gate_spread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = one_f_one_b()
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(dataclasses.asdict(plan)))
    store = tmp_path / "store"
    argv = ["train", str(plan_file), "--cluster", str(LOCAL), "--out", str(tmp_path / "m.json"),
            "--profiles", str(store)]  # fmt: skip
    graph, cluster = build_graph(plan.model), load_cluster(LOCAL)

    def predicted() -> float:
        pred = predict(plan, graph, cluster, compute_model("fp32", directory=store))
        assert pred.cost_source == "measured on cpu (written back)"
        return pred.iteration_time_s

    train_until_written(argv, capsys)
    first = predicted()
    train_until_written(argv, capsys)
    second = predicted()
    [profile] = load_profiles(store)
    assert [b.batch for b in profile.history] == [2, 2]  # both runs kept, merged
    assert abs(second - first) <= STEADY * first, (first, second)
