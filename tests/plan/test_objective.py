import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetplan.errors import InputError
from hetplan.plan.objective import Limits, Metrics, pareto_front, parse_objective


def metrics(time_s: float, energy_j: float, *, power_w: float = 100.0) -> Metrics:
    return Metrics(
        time_s=time_s,
        samples_per_s=32 / time_s,
        power_w=power_w,
        energy_j=energy_j,
        dollars=None,
        devices=2,
    )


def test_single_metric_scores_are_the_metric() -> None:
    ms = [metrics(2.0, 10.0), metrics(1.0, 30.0)]
    assert parse_objective("time").scores(ms) == [2.0, 1.0]
    assert parse_objective("energy").scores(ms) == [10.0, 30.0]
    assert parse_objective("edp").scores(ms) == [20.0, 30.0]
    assert parse_objective("throughput").scores(ms) == pytest.approx([2.0 / 32, 1.0 / 32])


def test_mix_is_weighted_geometric_mean_relative_to_best() -> None:
    ms = [metrics(2.0, 10.0), metrics(1.0, 30.0)]
    scores = parse_objective("time=1,energy=1").scores(ms)
    # candidate 0: time 2x best, energy 1x -> sqrt(2); candidate 1: 1x and 3x -> sqrt(3)
    assert scores == pytest.approx([math.sqrt(2.0), math.sqrt(3.0)])
    heavy_time = parse_objective("time=9,energy=1").scores(ms)
    assert heavy_time[1] < heavy_time[0]


def test_cost_without_price_is_never_chosen() -> None:
    assert parse_objective("cost").scores([metrics(1.0, 1.0)]) == [math.inf]


@pytest.mark.parametrize("text", ["speed", "time=0", "time=-1", "time=x"])
def test_bad_objective_names_the_problem(text: str) -> None:
    with pytest.raises(InputError, match="--objective"):
        parse_objective(text)


def test_limits_report_the_numbers() -> None:
    m = metrics(2.0, 10.0, power_w=500.0)
    lim = Limits(max_power_w=300.0, deadline_s=100.0, max_devices=1)
    reasons = lim.violations(m, iterations=100)
    assert "power 500 W > limit 300 W" in reasons
    assert "time 200.0 s > deadline 100.0 s" in reasons
    assert "2 devices > limit 1" in reasons
    assert Limits().violations(m, 100) == []


def test_pareto_front_hand_case() -> None:
    pts = [(1.0, 5.0), (2.0, 3.0), (3.0, 4.0), (4.0, 1.0), (2.0, 6.0)]
    assert pareto_front(pts) == [0, 1, 3]


@given(st.lists(st.tuples(st.floats(0, 10), st.floats(0, 10)), min_size=1, max_size=30))
def test_pareto_front_is_exactly_the_non_dominated_set(pts: list[tuple[float, float]]) -> None:
    front = set(pareto_front(pts))

    def dominated(i: int) -> bool:
        return any(
            pts[j][0] <= pts[i][0] and pts[j][1] <= pts[i][1] and pts[j] != pts[i]
            for j in range(len(pts))
        )

    for i in range(len(pts)):
        if dominated(i):
            assert i not in front
    # every non-dominated point value is represented (duplicates keep one representative)
    kept = {pts[i] for i in front}
    assert {p for i, p in enumerate(pts) if not dominated(i)} == kept
