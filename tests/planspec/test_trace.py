"""The one trace type: gaps, busy time and the simulated-against-measured comparison, checked
against hand counts."""

from __future__ import annotations

import pytest

from hetplan.planspec.trace import IDLE, Span, busy, compare, idle_gaps, shifted


def _s(kind: str, start: float, end: float, device: str = "a") -> Span:
    return Span(device=device, kind=kind, start=start, end=end)


def test_compute_spans_and_gaps_add_up_to_the_step() -> None:
    # step [0, 10]: fwd [1, 3], bwd [3, 6], a send [6, 9] (not compute), optimizer [8, 9.5]
    spans = [_s("fwd", 1, 3), _s("bwd", 3, 6), _s("send", 6, 9), _s("optimizer", 8, 9.5)]
    gaps = idle_gaps(spans, 0.0, 10.0, "a")
    assert [(g.start, g.end) for g in gaps] == [(0, 1), (6, 8), (9.5, 10)]
    assert all(g.kind == IDLE and g.device == "a" for g in gaps)
    assert busy(spans) + sum(g.duration for g in gaps) == pytest.approx(10.0)
    assert busy(spans) == pytest.approx(2 + 3 + 1.5)


def test_busy_counts_overlaps_once() -> None:
    assert busy([_s("fwd", 0, 2), _s("bwd", 1, 3), _s("fwd", 5, 6)]) == pytest.approx(4.0)


def test_shifted_moves_every_time() -> None:
    (s,) = shifted([_s("fwd", 101.0, 102.5)], 100.0)
    assert (s.start, s.end, s.kind, s.device) == (1.0, 2.5, "fwd", "a")


def test_compare_sums_durations_per_device_and_kind() -> None:
    sim = [_s("fwd", 0, 1), _s("fwd", 1, 2), _s("bwd", 2, 6), _s("fwd", 0, 4, "b")]
    # measured: a's forwards 1.5 + 1.5 = 3 (simulated 2: +50%), its backward 3 (4: -25%),
    # b's forward 4 (exact); an idle gap is not an action and is left out
    mea = [_s("fwd", 0, 1.5), _s("fwd", 1.5, 3), _s("bwd", 3, 6), _s("fwd", 0, 4, "b"),
           _s(IDLE, 6, 7)]  # fmt: skip
    c = compare(sim, mea)
    errors = {(r.device, r.kind): r.relative_error for r in c.rows}
    assert errors == pytest.approx({("a", "bwd"): -0.25, ("a", "fwd"): 0.5, ("b", "fwd"): 0.0})
    assert c.median_abs_error == pytest.approx(0.25)
    assert (c.simulated_end_s, c.measured_end_s) == (6, 7)


def test_a_kind_that_was_not_simulated_has_no_error() -> None:
    c = compare([_s("fwd", 0, 1)], [_s("fwd", 0, 1), _s("recv", 1, 2)])
    recv = next(r for r in c.rows if r.kind == "recv")
    assert (recv.simulated_s, recv.measured_s, recv.relative_error) == (0.0, 1.0, None)
