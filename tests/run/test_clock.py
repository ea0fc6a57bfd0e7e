"""The step clock: host time on CPU; on CUDA, events resolved against the base event after the
step and clamped into it (fake events: the arithmetic, which real CUDA checks in
tests/run/test_gpu_trace.py)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from hetplan.run.execute import clock as clock_mod
from hetplan.run.execute.clock import StepClock


def test_cpu_stamps_are_the_host_clock_in_order() -> None:
    c = StepClock("cpu")
    t0 = c.begin()
    stamps = [c.stamp() for _ in range(3)]
    t1 = c.end()
    times = [c.time(s) for s in stamps]
    assert not c.device_timed and c.source == "host clock"
    assert t0 <= times[0] <= times[1] <= times[2] <= t1


class _FakeEvent:
    """An event that ran ``ms`` milliseconds of device time after the base event."""

    def __init__(self, ms: float) -> None:
        self.ms = ms

    def elapsed_time(self, other: _FakeEvent) -> float:
        return other.ms - self.ms


def test_cuda_stamps_are_device_time_from_the_base_event(monkeypatch: pytest.MonkeyPatch) -> None:
    # base at device 0 ms, then stamps at 2, 5 and 900 ms; the host clock reads 10.0 s at the
    # opening synchronise and 10.5 s at the closing one
    device_ms = iter([0.0, 2.0, 5.0, 900.0])
    host = itertools.chain([10.0, 10.5])
    monkeypatch.setattr(clock_mod, "_event", lambda: _FakeEvent(next(device_ms)))
    monkeypatch.setattr(clock_mod.time, "perf_counter", lambda: next(host))
    monkeypatch.setattr(clock_mod.torch.cuda, "synchronize", lambda: None)
    c: Any = StepClock("cpu")
    c.device_timed, c._cuda = True, True  # what a CUDA device sets
    assert c.begin() == 10.0
    stamps = [c.stamp() for _ in range(3)]
    assert c.end() == 10.5
    # 10.0 + 2 ms, 10.0 + 5 ms, and 900 ms clamped to the step's end
    assert [c.time(s) for s in stamps] == pytest.approx([10.002, 10.005, 10.5])
