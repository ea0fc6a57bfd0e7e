"""Property tests: any generated schedule, simulated, respects dependencies and resources."""

from __future__ import annotations

import itertools
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from hetplan.schedule import (
    CutWork,
    PipelineWork,
    PsWork,
    Schedule,
    StageWork,
    SyncBucket,
    data_parallel,
    gpipe,
    one_f_one_b,
    parameter_server,
    pipedream_async,
    synchronous,
    wsp,
)
from hetplan.simulate import simulate

durations = st.floats(min_value=0.0, max_value=5.0, allow_nan=False)
EPS = 1e-9


@st.composite
def plans(draw: st.DrawFn) -> Schedule:
    kind = draw(
        st.sampled_from(["dp", "ps", "ps_async", "gpipe", "1f1b", "pipedream", "hybrid", "wsp"])
    )
    single = kind in ("gpipe", "1f1b", "pipedream")
    one_stage = kind in ("dp", "ps", "ps_async")
    reps = 1 if single else draw(st.integers(1, 3))
    num = 1 if one_stage else draw(st.integers(1, 4))
    tp = draw(st.integers(1, 2))
    m = draw(st.integers(1, 5))
    nparts = draw(st.integers(1, 3))
    pipes = []
    for r in range(reps):
        stages = []
        for s in range(num):
            parts = tuple(draw(durations) for _ in range(nparts))
            devs = tuple(f"r{r}s{s}t{t}" for t in range(tp))
            stages.append(
                StageWork(
                    devices=devs,
                    fwd_s=draw(durations),
                    bwd_s=sum(parts),
                    bwd_parts=parts,
                    opt_s=draw(durations),
                )
            )
        cuts = tuple(CutWork(fwd_s=draw(durations), bwd_s=draw(durations)) for _ in range(num - 1))
        pipes.append(PipelineWork(stages=tuple(stages), cuts=cuts, batch=m * 2))
    buckets = [
        [SyncBucket(part=k, duration_s=draw(durations)) for k in range(nparts)] for _ in range(num)
    ]
    if kind == "dp":
        return data_parallel(pipes, buckets[0], m)
    if kind in ("ps", "ps_async"):
        ps = [PsWork(push_s=draw(durations), pull_s=draw(durations)) for _ in pipes]
        return parameter_server(pipes, ["ps0", "ps1"], ps, m, asynchronous=kind == "ps_async")
    if kind == "gpipe":
        return gpipe(pipes[0], m)
    if kind == "1f1b":
        return one_f_one_b(pipes[0], m)
    if kind == "pipedream":
        return pipedream_async(pipes[0], m)
    if kind == "hybrid":
        return synchronous(
            "hybrid", pipes, m, order=draw(st.sampled_from(["gpipe", "1f1b"])), buckets=buckets
        )
    return wsp(pipes, m, draw(st.integers(0, 3)), buckets=buckets)


@settings(max_examples=150, deadline=None)
@given(plans())
def test_simulated_schedule_respects_dependencies_and_resources(sched: Schedule) -> None:
    tl = simulate(sched)
    acts = sched.actions
    # Every action executed: it has a start, and ends exactly its duration later.
    assert len(tl.start) == len(acts) == len(tl.end)
    for i, act in enumerate(acts):
        assert tl.start[i] >= 0.0
        assert abs(tl.end[i] - tl.start[i] - act.duration_s) <= EPS
        for d in act.deps:
            assert tl.start[i] >= tl.end[d] - EPS
    # No resource runs two actions at once, and each runs its actions in schedule order.
    by_res: dict[str, list[int]] = defaultdict(list)
    for i, act in enumerate(acts):
        for r in act.resources:
            by_res[r].append(i)
    for ids in by_res.values():
        for a, b in itertools.pairwise(ids):
            assert tl.start[b] >= tl.end[a] - EPS
    # The per-device split adds up to the iteration time.
    length = tl.window[1] - tl.window[0]
    per_iter = tl.iteration_time_s / length if length > 0 else 0.0
    for dev in tl.devices.values():
        total = dev.compute_s + dev.exposed_comm_s + dev.bubble_s
        assert abs(total - length * per_iter) <= 1e-6 * max(1.0, total)
        assert 0.0 <= dev.busy_fraction <= 1.0 + EPS


@settings(max_examples=60, deadline=None)
@given(plans())
def test_one_pass_matches_fixed_point_iteration(sched: Schedule) -> None:
    # Brute force: iterate start = max(deps, previous on each resource) to a fixed point,
    # visiting actions in reverse order; it must agree with the one-pass simulator.
    acts = sched.actions
    prev: dict[int, list[int]] = defaultdict(list)
    last: dict[str, int] = {}
    for i, act in enumerate(acts):
        for r in act.resources:
            if r in last:
                prev[i].append(last[r])
            last[r] = i
    start = [0.0] * len(acts)
    changed = True
    while changed:
        changed = False
        for i in reversed(range(len(acts))):
            preds = list(acts[i].deps) + prev[i]
            t = max((start[p] + acts[p].duration_s for p in preds), default=0.0)
            if t > start[i] + 1e-12:
                start[i] = t
                changed = True
    tl = simulate(sched)
    assert all(abs(a - b) <= 1e-9 for a, b in zip(start, tl.start, strict=True))
