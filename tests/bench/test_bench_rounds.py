"""Interleaved rounds (:mod:`hetplan.bench.rounds`) and the noise figures read from them."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, cast

import pytest

from hetplan.bench.rounds import Pending, measure_rounds, merge
from hetplan.bench.stats import best_round_time, pooled_times, round_spread, selections, summarize
from hetplan.bench.types import PLANNER, CaseResult
from hetplan.cluster import Cluster
from hetplan.planspec import Plan
from hetplan.run.launch.spawn import RunError
from hetplan.run.measurement.measure import Measurement


@dataclass
class FakeRun:
    """What :func:`merge` reads of a :class:`Measurement`."""

    measured_iteration_s: float
    iteration_p10_s: float
    iteration_p90_s: float


def fake(t: float, p10: float | None = None, p90: float | None = None) -> Measurement:
    return cast(Measurement, FakeRun(t, t if p10 is None else p10, t if p90 is None else p90))


def pending(*labels: str) -> list[Pending]:
    return [Pending(strategy=x, plan=cast(Plan, x), label=x) for x in labels]


def test_rounds_alternate_the_order_and_keep_every_run() -> None:
    calls: list[str] = []

    def measure(plan: Any, _cluster: Any, *, steps: int, warmup: int) -> Measurement:
        assert (steps, warmup) == (5, 2)
        calls.append(plan)
        return fake(float(len(calls)))

    todo = pending("a", "b", "c")
    said: list[str] = []
    measure_rounds(todo, cast(Cluster, None), rounds=3, steps=5, warmup=2, say=said.append,
                   measure=measure)  # fmt: skip
    # forward, backward, forward: each plan's mean position is the same (drift cancels)
    assert calls == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]
    assert [[m.measured_iteration_s for m in p.runs] for p in todo] == [
        [1.0, 6.0, 7.0], [2.0, 5.0, 8.0], [3.0, 4.0, 9.0]
    ]  # fmt: skip
    assert said[0] == "round 1/3: a" and said[3] == "round 2/3: c"


def test_a_failed_run_drops_the_plan_from_later_rounds() -> None:
    calls: list[str] = []

    def measure(plan: Any, _cluster: Any, **_kw: int) -> Measurement:
        calls.append(plan)
        if plan == "b":
            raise RunError("rank 1 failed: boom")
        return fake(1.0)

    todo = pending("a", "b")
    measure_rounds(todo, cast(Cluster, None), rounds=2, steps=1, warmup=0, say=lambda _m: None,
                   measure=measure)  # fmt: skip
    assert calls == ["a", "b", "a"]
    assert todo[1].failure == "rank 1 failed: boom" and len(todo[0].runs) == 2


def test_merge_takes_the_median_round_and_the_outer_percentiles() -> None:
    m = merge([fake(0.30, 0.25, 0.40), fake(0.20, 0.18, 0.22), fake(0.22, 0.21, 0.30)])
    assert m.median_s == pytest.approx(0.22)
    assert (m.p10_s, m.p90_s) == (0.18, 0.40)
    assert m.rounds_s == [0.30, 0.20, 0.22]
    assert m.last.measured_iteration_s == 0.22
    assert merge([fake(0.3), fake(0.1)]).median_s == pytest.approx(0.2)  # two rounds: the mean


def case(strategy: str, rounds: list[float], plan: dict[str, Any] | None = None) -> CaseResult:
    t = statistics.median(rounds) if rounds else 1.0
    return CaseResult(
        model="m", cluster="c", strategy=strategy, label=strategy, ranks=2, predicted_s=t,
        measured_s=t, measured_p10_s=t, measured_p90_s=t, plan=plan or {}, rounds_s=rounds,
    )  # fmt: skip


def test_round_spread_and_the_noise_floor() -> None:
    assert round_spread(case("dp", [0.2, 0.25])) == pytest.approx(0.25)
    assert round_spread(case("dp", [0.2])) is None
    assert round_spread(case("dp", [])) is None
    s = summarize([case("dp", [0.2, 0.25]), case("gpipe", [0.4, 0.44, 0.5]), case("x", [1.0])])
    # spreads .25 and .25 (0.5 / 0.4); the one-round case has none
    assert s.round_noise == pytest.approx(0.25)
    assert summarize([case("dp", [0.2])]).round_noise is None


def test_a_miss_inside_the_rounds_spread_is_not_resolved() -> None:
    # pick 0.22 (rounds .21/.23), fastest dp 0.20 (rounds .19/.21): 10% slower, spreads 9.5%
    # and 10.5%, so the measurement cannot order them
    close = summarize([case("dp", [0.19, 0.21]), case(PLANNER, [0.21, 0.23])]).selections[0]
    assert not close.hit and close.noise == pytest.approx(0.21 / 0.19 - 1)
    assert not close.resolved_miss
    # the same slowdown with steady rounds is a miss the measurement resolves
    clear = summarize([case("dp", [0.2, 0.2]), case(PLANNER, [0.22, 0.22])]).selections[0]
    assert not clear.hit and clear.noise == 0.0 and clear.resolved_miss
    # without rounds (results saved before), every miss counts
    old = summarize([case("dp", [0.2]), case(PLANNER, [0.22])]).selections[0]
    assert old.noise is None and old.resolved_miss


def test_best_round_selection_ranks_the_undisturbed_speeds() -> None:
    # dp 0.20 undisturbed, read 1.37x slow in two of its three rounds (median 0.274); the pick
    # 0.22 undisturbed (10% slower), slow in one (median 0.22): the medians call the pick the
    # fastest, the fastest rounds call it a 10% miss
    slow = 1.37
    dp = case("dp", [0.20 * slow, 0.20, 0.20 * slow])
    pick = case(PLANNER, [0.22, 0.22 * slow, 0.22])
    s = summarize([dp, pick])
    assert s.selections[0].fastest == PLANNER and s.selection_accuracy == 1.0
    assert s.selection_accuracy_best_round == 0.0
    best = selections([dp, pick], best_round=True)[0]
    assert best.fastest == "dp" and best.slowdown == pytest.approx(0.22 / 0.20 - 1)


def test_best_round_pools_every_round_of_one_plan() -> None:
    # the planner's plan is dp's: both cases' rounds pool, the fastest of the four counts
    a = case("dp", [0.30, 0.25], plan={"strategy": "dp"})
    b = case(PLANNER, [0.24, 0.31], plan={"strategy": "dp"})
    other = case("gpipe", [0.26, 0.26], plan={"strategy": "gpipe"})
    times = pooled_times([a, b, other], best_round=True)
    assert times[id(a)] == times[id(b)] == 0.24 and times[id(other)] == 0.26
    assert pooled_times([a, b, other])[id(a)] == pytest.approx(0.275)  # the medians' mean
    assert best_round_time(case("x", [])) == 1.0  # no rounds: its measured time
    one_round = summarize([case("dp", [0.2]), case(PLANNER, [0.2])])
    assert one_round.selection_accuracy_best_round is None
