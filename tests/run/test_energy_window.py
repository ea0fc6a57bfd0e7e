"""The energy window of a rank's step loop: the meter is read once when the first timed step
starts and once after the last, never per step (a fake meter counts its reads)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from hetplan.run.loop import worker
from hetplan.run.loop.worker import _Loop, _Out


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
    loop.out = _Out(step_s=[0.5])  # one warm-up step before the window
    loop._open_window()
    loop.out.step_s += [0.5, 0.5, 0.5]
    loop._close_window()
    joules, seconds, steps = loop.out.energy_window
    assert meter.reads == 2
    assert (joules, steps) == (100.0, 3) and seconds >= 0
    assert loop.out.power_limit_w == pytest.approx(700.0)


def test_no_meter_no_window() -> None:
    loop: Any = _Loop.__new__(_Loop)
    loop.meter, loop.ctx, loop._energy_start, loop.out = None, None, None, _Out()
    loop._open_window()
    loop._close_window()
    assert loop.out.energy_window is None


def _loop(monkeypatch: pytest.MonkeyPatch, meter: Any, events: list[Any]) -> Any:
    """A rank's step loop over 2 warm-up and 3 timed steps whose steps, log lines and meter
    reads append to ``events`` (the executor's figures and the training itself faked)."""

    def record(out: _Out, executor: object) -> None:
        out.step_s.append(0.5)
        out.loss.append(1.0)

    monkeypatch.setattr(worker, "_record_step", record)
    loop: Any = _Loop.__new__(_Loop)
    loop.meter, loop.ctx, loop._energy_start = meter, SimpleNamespace(device="cpu", rank=0), None
    loop.role = SimpleNamespace(pipeline=0, stage=0, tp_rank=0, device="d")
    loop.executor = SimpleNamespace(close=dict, optimizer=torch.optim.SGD([torch.zeros(1)]))
    loop.start, loop.seed, loop.warmup, loop.total = SimpleNamespace(step=0), 0, 2, 5
    loop.job = SimpleNamespace(return_grads=False)
    loop.ckpt_dir, loop.every, loop.log = None, 0, None
    loop.setup, loop.energy_note = SimpleNamespace(held_bytes=0), ""
    loop.out = _Out()
    loop._step = lambda i, step: events.append(("step", i))
    loop._log = lambda step, i: events.append(("log", i))
    loop._should_stop = lambda i: False
    read = meter.read_j

    def read_j() -> float:
        events.append("read")
        return read()

    meter.read_j = read_j
    return loop


def test_a_run_reads_the_meter_when_its_first_timed_step_starts_and_its_last_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[Any] = []
    meter = _Meter()
    out = _loop(monkeypatch, meter, events).run()
    assert events == [
        ("step", 0), ("log", 0), ("step", 1), ("log", 1),
        "read", ("step", 2), ("log", 2), ("step", 3), ("log", 3), ("step", 4),
        "read", ("log", 4),
    ]  # fmt: skip
    assert meter.reads == 2 and out.energy_window[::2] == (100.0, 3)


def test_a_trial_stopped_early_closes_its_window_at_the_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[Any] = []
    loop = _loop(monkeypatch, _Meter(), events)
    loop._should_stop = lambda i: i == 3
    out = loop.run()
    assert events.count("read") == 2 and events[-1] == "read"
    assert out.energy_window[2] == 2  # timed steps 2 and 3
