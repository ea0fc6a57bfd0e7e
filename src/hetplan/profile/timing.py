"""Clocks, memory probes and thread settings for timing code on CPU or CUDA.

CUDA kernels run asynchronously: a host clock read after a launch measures the launch, not the
kernel. The CUDA clock therefore records events on the current stream and reads them only after
:meth:`Clock.finish` has synchronised the device.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import torch

from hetplan.errors import InputError


class Clock(Protocol):
    """Timestamps that can be compared once :meth:`finish` has been called."""

    def mark(self) -> Any:
        """A timestamp of the current point in the device's work queue."""
        ...

    def finish(self) -> None:
        """Wait until every marked point has been reached."""
        ...

    def seconds(self, start: Any, end: Any) -> float:
        """Seconds between two marks (after :meth:`finish`)."""
        ...


class HostClock:
    """``time.perf_counter`` for devices that run synchronously (CPU)."""

    def mark(self) -> float:
        return time.perf_counter()

    def finish(self) -> None:
        return None

    def seconds(self, start: float, end: float) -> float:
        return end - start


class CudaClock:
    """CUDA events on the current stream; read after synchronising the device."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def mark(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def finish(self) -> None:
        torch.cuda.synchronize(self.device)

    def seconds(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end)) / 1e3  # elapsed_time is in milliseconds


class MemoryProbe(Protocol):
    """Peak device memory allocated since the last :meth:`reset`, where the device reports it."""

    def reset(self) -> None: ...

    def peak_bytes(self) -> int | None:
        """Peak bytes allocated above the level at the last reset; None if unknown."""
        ...


class NoMemoryProbe:
    """CPU: the allocator does not report peaks, so every figure is None."""

    def reset(self) -> None:
        return None

    def peak_bytes(self) -> int | None:
        return None


class CudaMemoryProbe:
    """``max_memory_allocated`` above the allocation level at the last reset."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.base = 0

    def reset(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)
        self.base = torch.cuda.memory_allocated(self.device)

    def peak_bytes(self) -> int | None:
        return int(torch.cuda.max_memory_allocated(self.device)) - self.base


def clock_for(device: torch.device) -> Clock:
    return CudaClock(device) if device.type == "cuda" else HostClock()


def memory_probe_for(device: torch.device) -> MemoryProbe:
    return CudaMemoryProbe(device) if device.type == "cuda" else NoMemoryProbe()


def device_name(device: torch.device) -> str:
    """Human-readable name of the hardware behind ``device`` (GPU model or CPU model)."""
    if device.type == "cuda":
        return str(torch.cuda.get_device_name(device))
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


@contextmanager
def thread_scope(threads: int | None, cpus: tuple[int, ...] | None) -> Iterator[int]:
    """Run with ``threads`` intra-op threads and pinned to ``cpus``; restore both afterwards.

    Yields the thread count in effect (what the profile records).
    """
    old_threads = torch.get_num_threads()
    can_pin = hasattr(os, "sched_setaffinity")
    old_cpus = os.sched_getaffinity(0) if can_pin else None
    try:
        if cpus is not None:
            if not can_pin or old_cpus is None:
                raise InputError("cpus: CPU pinning is not available on this system")
            try:
                os.sched_setaffinity(0, cpus)
            except OSError:
                have = ",".join(str(c) for c in sorted(old_cpus))
                raise InputError(
                    f"cpus {list(cpus)}: cannot pin to these cores; this process may use {have}"
                ) from None
        if threads is not None:
            torch.set_num_threads(threads)
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(old_threads)
        if cpus is not None and old_cpus is not None:
            os.sched_setaffinity(0, old_cpus)
