"""``tune`` tries the plans that tie with the best first, each distinct in what it would
measure (issue 27, item 2): hand-made rankings."""

from __future__ import annotations

import dataclasses
from typing import Any

from hetplan.plan.objective import parse_objective
from hetplan.plan.search import Ranked, Ranking
from hetplan.planspec import Plan
from hetplan.predict.error_bars import Interval
from hetplan.serde import from_data
from hetplan.usecases.tune import candidates_of, measured_key, tie_order


def _plan(strategy: str, stages: int = 1, micro: int = 1, pipelines: int = 1) -> Plan:
    """``pipelines`` pipelines of ``stages`` one-device stages, 8 samples each."""
    layers = [["a", "b"]] if stages == 1 else [["a"], ["b"]]
    pipes = [
        {
            "batch": 8,
            "stages": [
                {"layers": ls, "devices": [f"d.{p * stages + s}"]} for s, ls in enumerate(layers)
            ],
        }
        for p in range(pipelines)
    ]
    data: dict[str, Any] = {
        "model": {"name": "m"},
        "strategy": strategy,
        "global_batch": 8 * pipelines,
        "micro_batches": micro,
        "pipelines": pipes,
    }
    return from_data(Plan, data, "test")


class _Pred:
    def __init__(self, seconds: float, lo: float, hi: float) -> None:
        self.iteration_time_s = seconds
        self.energy_j_per_iteration = 1.0
        self.interval = Interval(low_s=lo, high_s=hi, coverage=0.8, basis="hand")


class _Cand:
    def __init__(self, label: str, plan: Plan) -> None:
        self.label, self.plan, self.family, self.baseline = label, plan, plan.strategy, None


def _ranking(rows: list[tuple[str, Plan, float, float, float]]) -> Ranking:
    ranked = [
        Ranked(candidate=_Cand(label, plan), prediction=_Pred(t, lo, hi), metrics=None, score=t)  # type: ignore[arg-type]
        for label, plan, t, lo, hi in rows
    ]
    return Ranking(objective=parse_objective("time"), ranked=ranked, baselines={})


def test_a_one_stage_pipeline_measures_what_data_parallelism_does() -> None:
    dp = _plan("dp")
    assert measured_key(_plan("gpipe", micro=4)) == measured_key(dp)
    assert measured_key(_plan("1f1b", micro=2)) == measured_key(dp)
    assert measured_key(_plan("gpipe", stages=2, micro=4)) != measured_key(dp)
    dp2 = _plan("dp", pipelines=2)
    assert measured_key(dp2) != measured_key(dp)
    assert measured_key(_plan("hybrid", micro=2, pipelines=2)) == measured_key(dp2)
    assert measured_key(_plan("hybrid", stages=2, micro=2, pipelines=2)) != measured_key(dp2)


def test_ties_come_first_and_duplicates_of_what_is_measured_are_skipped() -> None:
    rows = [
        ("best dp", _plan("dp"), 1.0, 0.9, 1.3),  # one device, d.0
        ("gpipe 2 stages, far", _plan("gpipe", stages=2, micro=4), 1.1, 1.35, 2.0),
        ("one-stage gpipe, a tie", _plan("gpipe", micro=4), 1.15, 1.0, 1.5),
        ("1f1b 2 stages, a tie", _plan("1f1b", stages=2, micro=4), 1.2, 1.2, 1.6),
    ]
    ranking = _ranking(rows)
    assert [r.candidate.label for r in tie_order(ranking)] == [
        "best dp", "one-stage gpipe, a tie", "1f1b 2 stages, a tie", "gpipe 2 stages, far"
    ]  # fmt: skip
    # The one-stage gpipe would measure what the best dp measures: skipped.
    labels = [c.label for c in candidates_of(ranking, 3)]
    assert labels == ["best dp", "1f1b 2 stages, a tie", "gpipe 2 stages, far"]


def test_without_intervals_the_predicted_order_stands() -> None:
    rows = [("a", _plan("dp"), 1.0, 0.9, 1.3), ("b", _plan("gpipe", stages=2), 1.1, 1.0, 1.2)]
    ranking = _ranking(rows)
    for r in ranking.ranked:
        object.__setattr__(r.prediction, "interval", None)
    assert [r.candidate.label for r in tie_order(ranking)] == ["a", "b"]
    energy = dataclasses.replace(ranking, objective=parse_objective("energy"))
    assert [r.candidate.label for r in tie_order(energy)] == ["a", "b"]
