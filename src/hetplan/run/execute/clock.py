"""The step clock of a rank: device time on CUDA, host time on CPU.

On a GPU the host only queues kernels: a ``perf_counter`` around a forward measures how long
launching it took, not how long the GPU ran it (gpt2 bf16 on an H100: the host "saw" a 9.5 ms
forward in an 81.5 ms step and 46 ms of "wait" on a single rank). So on CUDA every stamp is a
CUDA event recorded on the current stream, and the step's stamps are resolved after the step's
closing synchronise into seconds on the host clock: ``t0 + elapsed(base, event)``, where the
base event is recorded right after the opening synchronise (an idle GPU runs it at once, so
its device time is the host's ``t0``). On CPU a stamp is ``perf_counter`` itself.

The step's wall time is unchanged (synchronise, ``perf_counter``, ..., synchronise,
``perf_counter``); every resolved stamp is clamped into its step. A stamp stays readable after
its step (a receive posted in one step of a PipeDream window is waited for in a later one),
up to :data:`HELD_STAMPS` of them.
"""

from __future__ import annotations

import time
from typing import Any

import torch

MS_PER_S = 1e3  # torch.cuda.Event.elapsed_time returns milliseconds (torch.cuda docs)
HELD_STAMPS = 1 << 16
"""Resolved stamps kept for later steps (the oldest are dropped): far more than the actions of
any window's steps in flight, a few MB at most."""


class StepClock:
    """Stamps taken during one step, resolved to seconds at its end (see the module)."""

    def __init__(self, device: str) -> None:
        self.device_timed = device.startswith("cuda") and torch.cuda.is_available()
        """Stamps are CUDA events (device time); False: host ``perf_counter``."""
        self.source = "cuda events" if self.device_timed else "host clock"
        """How the spans were timed, as reports and the write-back name it."""
        self._cuda = device.startswith("cuda")
        self._raw: dict[int, tuple[float, Any, Any]] = {}
        """Unresolved stamps: (host time of their step's start, its base event, the stamp)."""
        self._times: dict[int, float] = {}
        self._next = 0
        self._base: Any = None
        self.t0 = 0.0
        self.t_end = 0.0

    def begin(self) -> float:
        """Start a step: synchronise, take the host time and the device base; returns it."""
        if self._cuda:
            torch.cuda.synchronize()
        self.t0 = time.perf_counter()
        if self.device_timed:
            self._base = _event()
        return self.t0

    def stamp(self) -> int:
        """A point in the step (on CUDA: where the stream has got to); a key to resolve."""
        key = self._next
        self._next += 1
        now = _event() if self.device_timed else time.perf_counter()
        self._raw[key] = (self.t0, self._base, now)
        return key

    def end(self) -> float:
        """End the step: synchronise, take the host time and resolve its stamps; returns it."""
        if self._cuda:
            torch.cuda.synchronize()
        self.t_end = time.perf_counter()
        for key, (t0, base, raw) in self._raw.items():
            t = t0 + base.elapsed_time(raw) / MS_PER_S if self.device_timed else float(raw)
            self._times[key] = min(max(t, t0), self.t_end)
        self._raw = {}
        while len(self._times) > HELD_STAMPS:
            del self._times[next(iter(self._times))]
        return self.t_end

    def time(self, stamp: int) -> float:
        """Seconds (host clock) of a stamp that :meth:`end` resolved."""
        return self._times[stamp]


def _event() -> Any:
    """A timing event recorded now on the current CUDA stream."""
    ev = torch.cuda.Event(enable_timing=True)
    ev.record()
    return ev
