"""The feasibility margin's three verdicts, at their boundaries, by hand."""

from __future__ import annotations

import pytest

from hetplan.cost import memory_margin as mm
from hetplan.cost.memory_margin import memory_margin, memory_verdict, with_margin

# A device with a 100 B framework allowance and 1,000 B of other terms (1,100 B predicted);
# margin 1.3: it must have 100 + 1.3 x 1,000 = 1,400 B to fit with the margin.
TOTAL, FRAMEWORK, MARGIN = 1100.0, 100.0, 1.3


def test_with_margin_multiplies_the_terms_other_than_the_framework_allowance() -> None:
    assert with_margin(TOTAL, FRAMEWORK, MARGIN) == pytest.approx(1400.0)
    assert with_margin(TOTAL, 0.0, MARGIN) == pytest.approx(1430.0)
    assert with_margin(50.0, 100.0, MARGIN) == 100.0  # nothing but (part of) the allowance
    assert with_margin(TOTAL, FRAMEWORK, 1.0) == TOTAL


@pytest.mark.parametrize(
    ("capacity", "verdict"),
    [
        (2000.0, "fits"),
        (1400.0, "fits"),  # exactly the predicted peak with its margin
        (1399.0, "may not fit"),
        (1100.0, "may not fit"),  # exactly the predicted peak
        (1099.0, "does not fit"),
        (0.0, "does not fit"),
    ],
)
def test_three_verdicts_at_their_boundaries(capacity: float, verdict: str) -> None:
    assert memory_verdict(TOTAL, FRAMEWORK, capacity, MARGIN) == verdict


def test_margin_one_has_no_may_not_fit() -> None:
    assert memory_verdict(TOTAL, FRAMEWORK, 1100.0, 1.0) == "fits"
    assert memory_verdict(TOTAL, FRAMEWORK, 1099.0, 1.0) == "does not fit"


def test_constants_are_the_measured_ratios_and_the_fragmentation() -> None:
    # GPU: the peak ratio over the allocator's handed-out share of what it reserves.
    gpu = mm.GPU_MEMORY_MARGIN
    assert gpu == pytest.approx(mm.GPU_PEAK_RATIO / (1 - 0.15))
    assert gpu == pytest.approx(1.223, abs=0.005)  # bench_memory_margin.py, 2026-11-28 (s35)
    assert mm.CPU_MEMORY_MARGIN == mm.CPU_PEAK_RATIO
    assert memory_margin(True) == mm.GPU_MEMORY_MARGIN
    assert memory_margin(False) == mm.CPU_MEMORY_MARGIN
    assert min(mm.GPU_MEMORY_MARGIN, mm.CPU_MEMORY_MARGIN) >= 1.0
