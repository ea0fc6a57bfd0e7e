"""The simulated timeline and what it says: iteration time, throughput, per-device breakdown.

Per device, over the measurement window (one iteration from 0 to the last end, or the
steady-state window of the schedule's rate marks), time splits into three disjoint parts:

- **compute**: the device's compute stream is busy (forward, backward, optimizer);
- **exposed communication**: compute is idle while a transfer or collective involving the
  device runs (its links in either direction, its comm stream);
- **bubble**: neither: the device waits for other devices (pipeline fill/drain, stragglers).

So compute + exposed + bubble = window length for every device. Communication that runs while
the device computes is hidden and counts nowhere. Figures are reported per iteration (window
length / iteration time iterations in the window).
"""

from __future__ import annotations

from dataclasses import dataclass

from hetplan.planspec.trace import Span
from hetplan.schedule.types import Schedule, res_devices


@dataclass(frozen=True, kw_only=True)
class DeviceTime:
    """Per-iteration time split of one device."""

    compute_s: float
    exposed_comm_s: float
    bubble_s: float
    busy_fraction: float
    """compute / window: the utilisation the power model uses."""


@dataclass(frozen=True, kw_only=True)
class Timeline:
    """Start and end of every action of a schedule, and the figures derived from them."""

    schedule: Schedule
    start: list[float]
    end: list[float]
    iteration_time_s: float
    samples_per_s: float
    window: tuple[float, float]
    devices: dict[str, DeviceTime]
    bubble_fraction: float
    """Sum of bubble time / (devices x window)."""
    exposed_comm_s: float
    """Mean over devices of exposed communication per iteration."""

    @property
    def makespan_s(self) -> float:
        return max(self.end, default=0.0)

    def spans(self) -> list[Span]:
        """Every action with its times, in schedule order (the trace type the runtime's
        executed trace shares, :mod:`hetplan.planspec.trace`)."""
        return [
            Span(device=a.device, kind=a.kind, stage=a.stage, microbatch=a.microbatch,
                 part=a.part, start=s, end=e, pipeline=a.pipeline, iteration=a.iteration,
                 peer=a.peer)
            for a, s, e in zip(self.schedule.actions, self.start, self.end, strict=True)
        ]  # fmt: skip


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    spans.sort()
    out: list[tuple[float, float]] = []
    for s, e in spans:
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def _length(spans: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in spans)


def _minus(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Length of union(a) not covered by union(b); both sorted and disjoint."""
    total = 0.0
    j = 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                total += b[k][0] - cur
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            total += e - cur
    return total


def _rate(schedule: Schedule, end: list[float]) -> tuple[float, tuple[float, float]]:
    """(samples per second, measurement window)."""
    last = max(end, default=0.0)
    if not schedule.marks:
        return (schedule.samples_per_iteration / last if last > 0 else 0.0), (0.0, last)
    rate = 0.0
    t0s, t1s = [], []
    for mark in schedule.marks:
        t0 = 0.0 if mark.start < 0 else end[mark.start]
        t1 = end[mark.end]
        if t1 > t0:
            rate += mark.samples / (t1 - t0)
        t0s.append(t0)
        t1s.append(t1)
    return rate, (min(t0s), max(t1s))


def _resource_spans(
    start: list[float],
    end: list[float],
    res: list[tuple[int, ...]],
    nres: int,
    window: tuple[float, float],
    clip: bool,
) -> list[list[tuple[float, float]]]:
    """Busy intervals of each resource, in order (each resource runs one action at a time)."""
    spans: list[list[tuple[float, float]]] = [[] for _ in range(nres)]
    w0, w1 = window
    for s0, e0, ri in zip(start, end, res, strict=True):
        s, e = (max(s0, w0), min(e0, w1)) if clip else (s0, e0)
        if e <= s:
            continue
        for r in ri:
            spans[r].append((s, e))
    return spans


def summarize(
    schedule: Schedule,
    start: list[float],
    end: list[float],
    res: list[tuple[int, ...]],
    names: list[str],
) -> Timeline:
    """Derive iteration time, throughput and the per-device split from raw times."""
    rate, window = _rate(schedule, end)
    iteration = schedule.samples_per_iteration / rate if rate > 0 else 0.0
    length = window[1] - window[0]
    per_iter = iteration / length if length > 0 else 0.0
    spans = _resource_spans(start, end, res, len(names), window, bool(schedule.marks))
    comp: dict[str, list[tuple[float, float]]] = {}
    comm: dict[str, list[tuple[float, float]]] = {}
    for rid, name in enumerate(names):
        target = comp if name.startswith("compute:") else comm
        for dev in res_devices(name):
            target.setdefault(dev, []).extend(spans[rid])
    devices: dict[str, DeviceTime] = {}
    bubble_sum = exposed_sum = 0.0
    for dev in schedule.devices:
        c = comp.get(dev, [])  # one compute stream per device: already ordered and disjoint
        busy = _length(c)
        exposed = _minus(_union(comm.get(dev, [])), c)
        bubble = max(length - busy - exposed, 0.0)
        devices[dev] = DeviceTime(
            compute_s=busy * per_iter,
            exposed_comm_s=exposed * per_iter,
            bubble_s=bubble * per_iter,
            busy_fraction=busy / length if length > 0 else 0.0,
        )
        bubble_sum += bubble
        exposed_sum += exposed * per_iter
    ndev = max(len(schedule.devices), 1)
    return Timeline(
        schedule=schedule,
        start=start,
        end=end,
        iteration_time_s=iteration,
        samples_per_s=rate,
        window=window,
        devices=devices,
        bubble_fraction=bubble_sum / (ndev * length) if length > 0 else 0.0,
        exposed_comm_s=exposed_sum / ndev,
    )
