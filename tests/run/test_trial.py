"""The adaptive stopping rule of ``hetplan tune`` (:mod:`hetplan.run.loop.trial`), against Student's
t table values and half-widths worked by hand."""

from __future__ import annotations

import itertools
import math

import pytest

from hetplan.run.loop.trial import StopRule, halfwidth, t_975

# Two-sided 95% quantiles t_{0.975, df} from a printed Student's t table (df: value).
TABLE = {1: 12.706, 2: 4.303, 5: 2.571, 10: 2.228, 20: 2.086, 30: 2.042}


@pytest.mark.parametrize(("df", "t"), sorted(TABLE.items()))
def test_t_975_matches_the_table(df: int, t: float) -> None:
    assert t_975(df) == pytest.approx(t, abs=5e-4)


@pytest.mark.parametrize("df", [31, 100, 10_000])
def test_t_975_past_the_table_is_the_normal_quantile(df: int) -> None:
    assert t_975(df) == pytest.approx(1.960, abs=5e-4)


def test_t_975_decreases_with_df() -> None:
    values = [t_975(df) for df in range(1, 40)]
    assert all(a >= b for a, b in itertools.pairwise(values))


@pytest.mark.parametrize("df", [0, -1])
def test_t_975_needs_a_degree_of_freedom(df: int) -> None:
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_975(df)


def test_halfwidth_by_hand() -> None:
    # [1, 2, 3]: mean 2, sample variance (1 + 0 + 1) / 2 = 1, stdev 1; t(2) = 4.303.
    assert halfwidth([1.0, 2.0, 3.0]) == pytest.approx(4.303 / math.sqrt(3), rel=1e-4)
    # [2, 4]: mean 3, variance (1 + 1) / 1 = 2, stdev sqrt 2, over sqrt 2: 1; t(1) = 12.706.
    assert halfwidth([2.0, 4.0]) == pytest.approx(12.706, rel=1e-4)
    # Equal times: no spread, no half-width.
    assert halfwidth([0.5] * 6) == 0.0


def test_halfwidth_scales_with_the_spread() -> None:
    # Scaling every time by 10 scales the stdev, so the half-width, by 10.
    assert halfwidth([10.0, 20.0, 30.0]) == pytest.approx(10 * halfwidth([1.0, 2.0, 3.0]))


def test_no_decision_before_min_timed() -> None:
    same = [1.0] * 10  # a zero-width interval: would stop at once if allowed
    rule = StopRule(min_timed=5)
    assert [rule.decide(same[:n]) for n in range(5)] == [None] * 5
    assert rule.decide(same[:5]) is not None


def test_two_times_needed_even_with_min_timed_one() -> None:
    rule = StopRule(min_timed=1)
    assert rule.decide([]) is None
    assert rule.decide([1.0]) is None  # a t interval needs two values
    assert rule.decide([1.0, 1.0]) is not None


def test_stops_once_the_mean_is_precise() -> None:
    # [0.99, 1.00, 1.01]: mean 1, stdev 0.01, half-width 4.303 * 0.01 / sqrt 3 = 0.0248 (2.5%).
    times = [0.99, 1.0, 1.01]
    why = StopRule(rel_halfwidth=0.05).decide(times)
    assert why is not None
    assert "2.5%" in why
    assert StopRule(rel_halfwidth=0.02).decide(times) is None  # 2.5% > 2%


def test_goes_on_while_the_spread_is_wide() -> None:
    # [0.8, 1.0, 1.2]: stdev 0.2, half-width 0.497: 49.7% of the mean.
    times = [0.8, 1.0, 1.2]
    assert StopRule(rel_halfwidth=0.05).decide(times) is None
    assert StopRule(rel_halfwidth=0.5).decide(times) is not None


def test_stops_when_clearly_slower_than_the_best() -> None:
    # [1.6, 2.0, 2.4]: mean 2, stdev 0.4, half-width 4.303 * 0.4 / sqrt 3 = 0.9937 (49.7%: not
    # precise enough at 5%); the interval's lower end is 1.0063.
    times = [1.6, 2.0, 2.4]
    assert StopRule(best_s=None).decide(times) is None
    why = StopRule(best_s=0.9).decide(times)
    assert why is not None
    assert "clearly slower" in why
    assert StopRule(best_s=1.02).decide(times) is None  # 1.0063 < 1.02: could still win
    assert StopRule(best_s=2.5).decide(times) is None  # faster than the best


def test_clearly_slower_waits_for_min_timed() -> None:
    rule = StopRule(best_s=0.1, min_timed=4)
    assert rule.decide([5.0, 5.0, 5.0]) is None
    assert rule.decide([5.0, 5.0, 5.0, 5.0]) is not None
