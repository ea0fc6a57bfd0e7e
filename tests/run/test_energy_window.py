"""The energy window of a rank's step loop: the meter is read once when the first timed step
starts and once after the last, never per step (a fake meter counts its reads)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from hetplan.run.worker import _Loop


class _Meter:
    name = "nvml"
    scope = "fake"

    def __init__(self) -> None:
        self.reads = 0

    def read_j(self) -> float:
        self.reads += 1
        return 100.0 * self.reads  # 100 J between any two reads

    def power_limit_w(self) -> float:
        return 700.0


def test_window_reads_the_meter_at_its_two_ends_only() -> None:
    loop: Any = _Loop.__new__(_Loop)
    meter = _Meter()
    loop.meter, loop.ctx, loop._energy_start = meter, SimpleNamespace(device="cpu"), None
    loop.out = {"step_s": [0.5]}  # one warm-up step before the window
    loop._open_window()
    loop.out["step_s"] += [0.5, 0.5, 0.5]
    loop._close_window()
    joules, seconds, steps = loop.out["energy_window"]
    assert meter.reads == 2
    assert (joules, steps) == (100.0, 3) and seconds >= 0
    assert loop.out["power_limit_w"] == pytest.approx(700.0)


def test_no_meter_no_window() -> None:
    loop: Any = _Loop.__new__(_Loop)
    loop.meter, loop.ctx, loop._energy_start, loop.out = None, None, None, {"step_s": []}
    loop._open_window()
    loop._close_window()
    assert "energy_window" not in loop.out
