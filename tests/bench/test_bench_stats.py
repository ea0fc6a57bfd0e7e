"""Suite statistics on synthetic cases, checked against hand computation."""

from __future__ import annotations

import math

import pytest

from hetplan.bench.runner import profile_sizes
from hetplan.bench.stats import selections, speedups, summarize
from hetplan.bench.suite import micro_batches, strategies
from hetplan.bench.types import PLANNER, CaseResult


def case(model: str, cluster: str, strategy: str, predicted: float, measured: float) -> CaseResult:
    return CaseResult(
        model=model, cluster=cluster, strategy=strategy, label=strategy, ranks=2,
        predicted_s=predicted, measured_s=measured, measured_p10_s=measured,
        measured_p90_s=measured, plan={},
    )  # fmt: skip


H = "local-cpu-hetero"
CASES = [
    # errors: +10%, -20%, +50%, 0%, +5% (|error| sorted: 0, .05, .1, .2, .5)
    case("a", H, "dp", 1.0, 1.1),
    case("a", H, "gpipe", 1.0, 0.8),
    case("a", H, "1f1b", 1.0, 1.5),
    case("a", H, PLANNER, 0.5, 0.5),
    case("b", "local-cpu", "dp", 2.0, 2.1),
]


def test_error_median_and_p90_by_hand() -> None:
    s = summarize(CASES)
    assert s.cases == 5
    assert s.median_error == pytest.approx(0.1)
    # p90 of [0, .05, .1, .2, .5] by linear interpolation: position 3.6 -> .2 + .6 * .3 = .38
    assert s.p90_error == pytest.approx(0.38)
    # p10 equals the median in these cases: the same figure
    assert s.median_error_p10 == pytest.approx(0.1)


def test_selection_pick_fastest_and_speedups() -> None:
    s = summarize(CASES)
    # only group a has a planner case; the pick (0.5 s) is the fastest
    assert [(x.model, x.fastest, x.hit) for x in s.selections] == [("a", PLANNER, True)]
    assert s.selection_accuracy == 1.0
    assert s.worst_pick_slowdown == 0.0
    # vs dp: 1.1 / 0.5; vs equal pipeline: min(gpipe .8, 1f1b 1.5) / .5
    assert s.speedups == {
        "a": {"vs_dp": pytest.approx(2.2), "vs_equal_pipeline": pytest.approx(1.6)}
    }
    assert s.speedup_vs_dp == pytest.approx(2.2)


def test_selection_miss_within_and_beyond_tolerance() -> None:
    cases = [
        case("a", "c", "dp", 1, 1.00),
        case("a", "c", PLANNER, 1, 1.04),  # 4% slower: a hit within 5%
        case("b", "c", "dp", 1, 1.00),
        case("b", "c", PLANNER, 1, 1.30),  # 30% slower: a miss
    ]
    sel = {s.model: s for s in selections(cases)}
    assert sel["a"].hit and sel["a"].slowdown == pytest.approx(0.04)
    assert not sel["b"].hit and sel["b"].slowdown == pytest.approx(0.30)
    s = summarize(cases)
    assert s.selection_accuracy == 0.5
    assert s.selection_exact == 0.0
    assert s.worst_pick_slowdown == pytest.approx(0.30)


def test_speedup_geometric_mean_over_models() -> None:
    cases = [
        case("a", H, "dp", 1, 2.0), case("a", H, PLANNER, 1, 1.0),
        case("b", H, "dp", 1, 0.5), case("b", H, PLANNER, 1, 1.0),
    ]  # fmt: skip
    assert speedups(cases) == {"a": {"vs_dp": 2.0}, "b": {"vs_dp": 0.5}}
    assert summarize(cases).speedup_vs_dp == pytest.approx(1.0)
    assert summarize(cases).speedup_vs_equal_pipeline is None


def test_empty_suite_has_nan_errors_and_no_selection() -> None:
    s = summarize([])
    assert math.isnan(s.median_error)
    assert s.selection_accuracy is None


def test_suite_shapes() -> None:
    assert strategies(2) == ["dp", "fsdp", "zero1", "ps", "ps-async", "gpipe", "1f1b", "pipedream"]
    assert strategies(4)[-3:] == ["hybrid", "hybrid-fsdp", "wsp"]  # 2 pipelines x 2 stages
    assert strategies(4, tensor_parallel=True)[-1] == "tp"  # dp over two groups of two
    assert "tp" not in strategies(3, tensor_parallel=True)
    assert micro_batches(32, 3) == 4  # largest divisor of 32 up to 2 * 3
    assert micro_batches(16, 2) == 4
    assert micro_batches(3, 2) == 1  # at least 2 samples per micro-batch
    assert micro_batches(4, 2) == 2
    assert profile_sizes(32) == (1, 2, 4, 8, 16, 32)
    assert profile_sizes(12) == (1, 2, 4, 8, 12)


def test_same_plan_measured_twice_is_pooled() -> None:
    plan = {"strategy": "dp", "micro_batches": 1, "pipelines": [{"batch": 4}]}
    dp = case("a", H, "dp", 1.0, 1.2)
    pick = case("a", H, PLANNER, 1.0, 1.0)
    other = case("a", H, "gpipe", 1.0, 1.05)
    dp.plan = pick.plan = plan  # the planner picked the dp plan; its runs: 1.2 s and 1.0 s
    s = summarize([dp, pick, other])
    # pooled 1.1 s for both; gpipe 1.05 s is the fastest: the pick is 1.1 / 1.05 - 1 slower
    assert s.selections[0].fastest == "gpipe"
    assert s.selections[0].slowdown == pytest.approx(1.1 / 1.05 - 1)
    assert s.speedups["a"]["vs_dp"] == pytest.approx(1.0)
    assert s.repeatability == pytest.approx(0.2)


def test_interval_coverage_leaves_each_case_out() -> None:
    # Nine cases measured as predicted and one 3x slower. Leaving a 1.0 case out, the other
    # nine (eight 1.0, one 3.0) give the band [1.0, 3.0] (k = ceil(10 x 0.9) = 9: their
    # extremes): inside. Leaving the 3.0 case out, the nine 1.0 give [1.0, 1.0]: outside.
    # The default band of profiled CPU predictions (0.7-1.9) holds the nine 1.0 only.
    cases = [case("m", H, "dp", 1.0, 1.0) for _ in range(9)] + [case("m", H, "dp", 1.0, 3.0)]
    s = summarize(cases)
    assert s.interval_coverage == pytest.approx(0.9)
    assert s.default_coverage == pytest.approx(0.9)
    # Too few other cases for a band: the default decides for each (0.5 is outside it).
    few = summarize([case("m", H, "dp", 1.0, 1.0), case("m", H, "dp", 1.0, 0.5)])
    assert few.interval_coverage == pytest.approx(0.5)
    assert summarize([case("m", H, "dp", 1.0, 1.0)]).interval_coverage is None


def test_synchronous_and_asynchronous_ps_are_not_pooled() -> None:
    ps = {"strategy": "ps", "micro_batches": 1, "pipelines": [{"batch": 4}] * 2}
    sync = case("a", H, "ps", 1.0, 1.0)
    sync.plan = {**ps, "ps_async": False, "ps_assignment": "round_robin"}
    asyn = case("a", H, "ps-async", 1.0, 3.0)
    asyn.plan = {**ps, "ps_async": True, "staleness": 1, "ps_assignment": "round_robin"}
    pick = case("a", H, PLANNER, 1.0, 1.0)
    pick.plan = {**ps, "ps_async": False, "ps_assignment": "size"}
    dp = case("a", H, "dp", 1.0, 1.02)
    sel = selections([sync, asyn, pick, dp])[0]
    # the pick's own 1.0 s, not pooled with the async 3.0 s or the round-robin plan's run
    assert sel.hit and sel.slowdown == pytest.approx(0.0)


def test_zero_stages_and_sharded_stages_are_not_pooled() -> None:
    fsdp = {"strategy": "fsdp", "micro_batches": 1, "pipelines": [{"batch": 4}] * 2}
    zero1 = case("a", H, "zero1", 1.0, 1.0)
    zero1.plan = {**fsdp, "zero": 1}
    zero3 = case("a", H, "fsdp", 1.0, 2.0)
    zero3.plan = {**fsdp, "zero": 3}
    hybrid = {"strategy": "hybrid", "micro_batches": 2, "pipelines": [{"batch": 4}] * 2}
    plain = case("a", H, "hybrid", 1.0, 1.5)
    plain.plan = {**hybrid, "shard_stages": False}
    sharded = case("a", H, "hybrid-fsdp", 1.0, 3.0)
    sharded.plan = {**hybrid, "shard_stages": True, "zero": 3}
    s = summarize([zero1, zero3, plain, sharded])
    assert s.repeatability is None  # no plan was measured twice


def test_selection_against_the_synchronous_cases() -> None:
    """PipeDream measured fastest (stale weights: ``plan`` offers it only when asked): the
    pick misses against every case, hits against the synchronous ones; hand-made times."""
    group = [
        case("m", H, "pipedream", 1.0, 0.80),
        case("m", H, "dp", 1.0, 1.00),
        case("m", H, "gpipe", 1.0, 1.30),
        case("m", H, PLANNER, 1.0, 1.02),
    ]
    (sel,) = selections(group)
    assert sel.slowdown == pytest.approx(1.02 / 0.80 - 1) and not sel.hit
    assert sel.synchronous_slowdown == pytest.approx(0.02) and sel.synchronous_hit
    summary = summarize(group)
    assert summary.selection_accuracy == 0.0 and summary.selection_accuracy_synchronous == 1.0
