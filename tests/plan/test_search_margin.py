"""The ranking with the feasibility margin: plans that may not fit are kept, flagged and ranked
after the plans that fit (docs/planning.md)."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any, cast

from hetplan.cli.plan_view import _mem_free, table_rows
from hetplan.plan.objective import Metrics, Objective
from hetplan.plan.options import SearchOptions
from hetplan.plan.search import margin_notes, rank


def entry(family: str, time_s: float, verdict: str) -> tuple[Any, Any, Metrics]:
    warnings = [f"{family}.0: may not fit: (test)"] if verdict == "may not fit" else []
    cand = SimpleNamespace(family=family, baseline=None, plan=None)
    device = SimpleNamespace(memory_bytes=60.0, memory_capacity_bytes=100.0)
    pred = SimpleNamespace(
        memory_verdict=verdict, memory_warnings=warnings, iteration_time_s=time_s,
        devices=[device],
    )  # fmt: skip
    met = Metrics(time_s=time_s, samples_per_s=1 / time_s, power_w=1.0, energy_j=time_s,
                  dollars=None, devices=1)  # fmt: skip
    return cand, pred, met


OPTS = SearchOptions(
    batch=8, objective=Objective(weights={"time": 1.0}), families=("dp", "gpipe", "1f1b"),
    runnable_only=False,
)  # fmt: skip


def test_may_not_fit_ranked_after_every_plan_that_fits() -> None:
    simulated = [entry("dp", 1.0, "may not fit"), entry("gpipe", 2.0, "fits"),
                 entry("1f1b", 3.0, "fits")]  # fmt: skip
    ranking = rank(cast(Any, simulated), OPTS, Counter())
    assert [r.candidate.family for r in ranking.ranked] == ["gpipe", "1f1b", "dp"]
    assert [r.candidate.family for r in table_rows(ranking, 10)] == ["gpipe", "1f1b", "dp"]
    assert _mem_free(ranking.ranked[2]) == "40% ?"
    assert _mem_free(ranking.ranked[0]) == "40%"
    notes = margin_notes(ranking.ranked)
    assert notes[0] == (
        "1 of 3 ranked plans may not fit (feasibility margin, docs/cost-models.md section 6): "
        "ranked after the plans that fit"
    )
    assert notes[1] == (
        "a dp plan scores better than the pick (1 s per iteration) but may not fit: "
        "dp.0: may not fit: (test)"
    )


def test_notes_when_all_or_none_may_not_fit() -> None:
    none = rank(cast(Any, [entry("dp", 1.0, "fits")]), OPTS, Counter())
    assert margin_notes(none.ranked) == []
    every = rank(cast(Any, [entry("dp", 2.0, "may not fit"), entry("gpipe", 1.0, "may not fit")]),
                 OPTS, Counter())  # fmt: skip
    assert [r.candidate.family for r in every.ranked] == ["gpipe", "dp"]  # by score
    assert margin_notes(every.ranked) == [
        "no plan fits with the feasibility margin; the pick may run out of memory: "
        "gpipe.0: may not fit: (test)"
    ]
    # a plan that may not fit but scores worse than the pick: only the count
    later = rank(cast(Any, [entry("dp", 1.0, "fits"), entry("gpipe", 2.0, "may not fit")]),
                 OPTS, Counter())  # fmt: skip
    assert len(margin_notes(later.ranked)) == 1
