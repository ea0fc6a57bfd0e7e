"""Least-squares fits and summary statistics against hand-computed values."""

import pytest

from hetplan.profile.fit import LinearFit, fit_linear, summarize


def test_fit_recovers_exact_line() -> None:
    xs = [1, 2, 4, 8, 32]
    fit = fit_linear(xs, [0.5 + 0.25 * x for x in xs])
    assert fit.a_s == pytest.approx(0.5)
    assert fit.k_s == pytest.approx(0.25)
    assert fit.at(16) == pytest.approx(4.5)


def test_fit_is_least_squares_on_noisy_points() -> None:
    # x = 0, 1, 2; t = 1, 2, 4 -> normal equations: k = 1.5, a = 7/3 - 1.5 = 5/6
    fit = fit_linear([0, 1, 2], [1, 2, 4])
    assert fit.k_s == pytest.approx(1.5)
    assert fit.a_s == pytest.approx(5 / 6)


def test_negative_intercept_is_refit_through_origin() -> None:
    # unconstrained: t = -1 + 2x; with a = 0: k = sum(x t) / sum(x^2) = (1 + 6 + 28) / 21 = 5/3
    xs, ts = [1, 2, 4], [1, 3, 7]
    fit = fit_linear(xs, ts)
    assert fit.a_s == 0.0
    assert fit.k_s == pytest.approx(5 / 3)


def test_negative_slope_is_refit_as_constant() -> None:
    fit = fit_linear([1, 2, 3], [3.0, 2.0, 2.5])
    assert fit == LinearFit(a_s=pytest.approx(2.5), k_s=0.0)


def test_single_size_gives_constant() -> None:
    fit = fit_linear([4, 4], [1.0, 3.0])
    assert fit.k_s == 0.0 or fit.a_s == 0.0
    assert fit.at(4) == pytest.approx(2.0)


def test_fit_rejects_mismatched_input() -> None:
    with pytest.raises(ValueError, match="matching"):
        fit_linear([1, 2], [1.0])
    with pytest.raises(ValueError, match="matching"):
        fit_linear([], [])


def test_summarize_median_and_percentiles() -> None:
    # numpy's linear percentiles of 1..11: p10 = 2, median = 6, p90 = 10
    s = summarize([float(v) for v in reversed(range(1, 12))])
    assert (s.p10_s, s.median_s, s.p90_s) == (2.0, 6.0, 10.0)
    with pytest.raises(ValueError):
        summarize([])
