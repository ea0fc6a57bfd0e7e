"""A single-pass list scheduler: the times of a :class:`~hetplan.schedule.Schedule`.

Semantics (exact, deterministic): an action starts at the latest of (a) the end of each of its
dependencies and (b) the time each of its resources becomes free; it holds all its resources
for its duration. Each resource runs its actions in schedule order, one at a time (in-order
streams, as CUDA streams and NCCL process groups do). Because the schedule's action list is a
topological order of dependencies *and* per-resource chains (the builder guarantees it), one
pass over it computes every start and end; no event queue is needed. Cost: O(actions +
dependencies + resource uses), flat Python lists and integer ids in the loop.
"""

from __future__ import annotations

from hetplan.schedule.builder import paused_gc
from hetplan.schedule.types import Schedule
from hetplan.simulate.timeline import Timeline, summarize


def compile_schedule(
    schedule: Schedule,
) -> tuple[list[float], list[tuple[int, ...]], list[tuple[int, ...]], list[str]]:
    """Flat arrays: durations, dependency ids, resource ids, and the resource names."""
    acts = schedule.actions
    dur = [a.duration_s for a in acts]
    deps = [a.deps for a in acts]
    if len(schedule.action_resources) == len(acts):
        return dur, deps, list(schedule.action_resources), list(schedule.resource_names)
    res_id: dict[str, int] = {}
    res = [tuple(res_id.setdefault(r, len(res_id)) for r in a.resources) for a in acts]
    return dur, deps, res, list(res_id)


def run_times(
    dur: list[float], deps: list[tuple[int, ...]], res: list[tuple[int, ...]], nres: int
) -> tuple[list[float], list[float]]:
    """Start and end of every action (the hot loop)."""
    n = len(dur)
    start = [0.0] * n
    end = [0.0] * n
    free = [0.0] * nres
    for i in range(n):
        t = 0.0
        for d in deps[i]:
            e = end[d]
            # max(t, e) without a call: the same value, in a third of the time
            if e > t:  # noqa: PLR1730
                t = e
        ri = res[i]
        for r in ri:
            f = free[r]
            if f > t:  # noqa: PLR1730
                t = f
        e = t + dur[i]
        start[i] = t
        end[i] = e
        for r in ri:
            free[r] = e
    return start, end


def simulate(schedule: Schedule) -> Timeline:
    """Run ``schedule``; return its timeline with iteration time and per-device breakdown."""
    with paused_gc():
        return _simulate(schedule)


def _simulate(schedule: Schedule) -> Timeline:
    dur, deps, res, names = compile_schedule(schedule)
    if dur and min(dur) < 0:
        bad = schedule.actions[dur.index(min(dur))]
        raise ValueError(f"action {bad.label} on {bad.device}: negative duration {min(dur)}")
    start, end = run_times(dur, deps, res, len(names))
    return summarize(schedule, start, end, res, names)
