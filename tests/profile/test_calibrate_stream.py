"""Calibration probes timed back to back on a stream against per call (issue 30, item 2), on
a fake GPU: the host takes L to issue a call, the device K to run it, S to synchronise."""

from __future__ import annotations

import pytest

from hetplan.profile.calibrate import STREAM_CALLS, Settings, time_calls

LAUNCH, KERNEL, SYNC = 20e-6, 5e-6, 10e-6  # seconds: a launch-bound small kernel


class FakeGpu:
    """Host and device time lines; a mark completes when the device reaches it."""

    def __init__(self, kernel: float = KERNEL) -> None:
        self.kernel = kernel
        self.host = 0.0
        self.device_free = 0.0

    def call(self) -> None:
        self.host += LAUNCH
        self.device_free = max(self.device_free, self.host) + self.kernel

    def mark(self) -> float:
        return max(self.host, self.device_free)

    def finish(self) -> None:
        self.host = max(self.host, self.device_free) + SYNC

    def seconds(self, start: float, end: float) -> float:
        return end - start


SETTINGS = Settings(warmup=1, min_time_s=0.0, min_repeats=3, max_repeats=3)


def test_a_probe_timed_on_a_stream_has_a_lower_floor_than_one_timed_per_call() -> None:
    gpu = FakeGpu()
    per_call = time_calls(gpu.call, gpu, SETTINGS, stream=False)
    on_stream = time_calls(gpu.call, gpu, SETTINGS, stream=True)
    # Per call the idle device waits for the launch: L + K. Back to back the host is the
    # bottleneck (L > K): the first call's K plus one launch per call, L + K / n.
    assert per_call == pytest.approx(LAUNCH + KERNEL)
    assert on_stream == pytest.approx(LAUNCH + KERNEL / STREAM_CALLS)
    assert on_stream < per_call


def test_a_long_kernel_loses_only_its_launch_on_a_stream() -> None:
    kernel = 1e-3  # device bound: later launches hide behind the queue
    gpu = FakeGpu(kernel)
    per_call = time_calls(gpu.call, gpu, SETTINGS, stream=False)
    on_stream = time_calls(gpu.call, gpu, SETTINGS, stream=True)
    assert per_call == pytest.approx(kernel + LAUNCH)
    assert on_stream == pytest.approx(kernel + LAUNCH / STREAM_CALLS)
