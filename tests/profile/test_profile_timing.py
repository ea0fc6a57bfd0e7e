"""The CUDA clock and memory probe, against stand-ins for torch.cuda (no GPU here)."""

from typing import Any, ClassVar

import pytest
import torch

from hetplan.profile.timing import (
    CudaClock,
    CudaMemoryProbe,
    HostClock,
    NoMemoryProbe,
    clock_for,
    memory_probe_for,
)


class FakeEvent:
    log: ClassVar[list[str]] = []

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.at: float | None = None

    def record(self, stream: Any) -> None:
        FakeEvent.log.append(f"record on {stream}")
        self.at = len(FakeEvent.log) * 10.0  # milliseconds

    def elapsed_time(self, end: "FakeEvent") -> float:
        assert FakeEvent.log[-1] == "sync", "events must be read after synchronising"
        assert self.at is not None and end.at is not None
        return end.at - self.at


def test_cuda_clock_records_events_and_reads_them_after_sync(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    FakeEvent.log = []
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: f"stream of {device}")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device: FakeEvent.log.append("sync"))
    clock = CudaClock(torch.device("cuda", 1))
    a, b = clock.mark(), clock.mark()
    assert FakeEvent.log == ["record on stream of cuda:1"] * 2
    clock.finish()
    assert clock.seconds(a, b) == pytest.approx(0.010)  # 10 ms apart


def test_cuda_memory_probe_reports_peak_above_the_reset_level(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = {"allocated": 1000, "peak": 5000, "resets": 0}

    def reset(device: Any) -> None:
        state["resets"] += 1
        state["peak"] = state["allocated"]

    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: state["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: state["peak"])
    probe = CudaMemoryProbe(torch.device("cuda", 0))
    probe.reset()
    state["peak"] = 1700  # the layer allocated 700 bytes at its peak
    assert state["resets"] == 1
    assert probe.peak_bytes() == 700


def test_device_picks_the_clock_and_probe() -> None:
    assert isinstance(clock_for(torch.device("cpu")), HostClock)
    assert isinstance(clock_for(torch.device("cuda", 0)), CudaClock)
    assert isinstance(memory_probe_for(torch.device("cpu")), NoMemoryProbe)
    assert isinstance(memory_probe_for(torch.device("cuda", 0)), CudaMemoryProbe)
    assert NoMemoryProbe().peak_bytes() is None
