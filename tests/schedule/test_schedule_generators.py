"""Schedule generators: orders, dependencies, grid printing."""

from __future__ import annotations

import pytest

from hetplan.schedule import (
    CutWork,
    PipelineWork,
    PsWork,
    ScheduleBuilder,
    StageWork,
    SyncBucket,
    compute_only,
    data_parallel,
    format_grid,
    gpipe,
    one_f_one_b,
    parameter_server,
    pipedream_async,
    wsp,
)
from hetplan.schedule.pipeline import insert_optimizer, stage_order


def _pipe(num: int, batch: int = 8, prefix: str = "d") -> PipelineWork:
    stages = tuple(StageWork(devices=(f"{prefix}{i}",), fwd_s=1.0, bwd_s=2.0) for i in range(num))
    cuts = tuple(CutWork(fwd_s=0.1, bwd_s=0.1, nbytes=10) for _ in range(num - 1))
    return PipelineWork(stages=stages, cuts=cuts, batch=batch)


def test_1f1b_order_matches_pipedream_flush() -> None:
    # Megatron / torch Schedule1F1B for 4 stages, 6 micro-batches, stage 1: 2 warm-up forwards.
    ops = stage_order("1f1b", 1, 4, 6)
    got = " ".join(f"{k}{j}" for k, j in ops)
    assert got == "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5"
    assert stage_order("1f1b", 3, 4, 3) == [
        ("F", 0),
        ("B", 0),
        ("F", 1),
        ("B", 1),
        ("F", 2),
        ("B", 2),
    ]
    # Fewer micro-batches than warm-up slots: all forwards, then all backwards.
    assert stage_order("1f1b", 0, 8, 2) == [("F", 0), ("F", 1), ("B", 0), ("B", 1)]


def test_gpipe_order() -> None:
    assert stage_order("gpipe", 2, 4, 3) == [
        ("F", 0),
        ("F", 1),
        ("F", 2),
        ("B", 0),
        ("B", 1),
        ("B", 2),
    ]


def test_optimizer_insertion_sync_and_lagged() -> None:
    ops = [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2), ("F", 3), ("B", 3)]
    sync = insert_optimizer(ops, 2, None)
    assert sync == [
        ("F", 0),
        ("B", 0),
        ("F", 1),
        ("B", 1),
        ("O", 0),
        ("F", 2),
        ("B", 2),
        ("F", 3),
        ("B", 3),
        ("O", 1),
    ]
    lag1 = insert_optimizer(ops, 2, 1)
    # Wave 0's step goes right before wave 1's first forward; wave 1's (no wave 2) goes last.
    assert lag1.index(("O", 0)) == lag1.index(("F", 2)) - 1
    assert lag1[-1] == ("O", 1)


def test_gpipe_grid_is_exact() -> None:
    grid = format_grid(gpipe(_pipe(2), 3))
    assert grid.splitlines() == [
        "d0 | F0  F1  F2  B0  B1  B2  OPT",
        "d1 | F0  F1  F2  B0  B1  B2  OPT",
    ]


def test_every_microbatch_runs_forward_then_backward_once_per_stage() -> None:
    sched = one_f_one_b(_pipe(4), 6)
    for dev in ("d0", "d1", "d2", "d3"):
        acts = compute_only(sched, dev)
        fwd = [a.microbatch for a in acts if a.kind == "fwd"]
        bwd = [a.microbatch for a in acts if a.kind == "bwd"]
        assert sorted(fwd) == list(range(6)) and sorted(bwd) == list(range(6))
        for j in range(6):
            assert acts.index(next(a for a in acts if a.kind == "fwd" and a.microbatch == j)) < (
                acts.index(next(a for a in acts if a.kind == "bwd" and a.microbatch == j))
            )
    # Sends: one activation and one gradient per micro-batch per cut.
    sends = [a for a in sched.actions if a.kind == "send"]
    assert len(sends) == 2 * 3 * 6


def test_dp_buckets_wait_for_their_backward_part_on_every_replica() -> None:
    reps = [
        PipelineWork(
            stages=(StageWork(devices=(f"g{r}",), fwd_s=1, bwd_s=3, bwd_parts=(1, 1, 1)),), batch=4
        )
        for r in range(3)
    ]
    buckets = [SyncBucket(part=0, duration_s=0.5), SyncBucket(part=2, duration_s=0.5)]
    sched = data_parallel(reps, buckets)
    ars = [a for a in sched.actions if a.kind == "allreduce"]
    assert len(ars) == 2
    for ar, part in zip(ars, (0, 2), strict=True):
        parents = [sched.actions[d] for d in ar.deps]
        assert sorted(p.device for p in parents) == ["g0", "g1", "g2"]
        assert {(p.kind, p.part) for p in parents} == {("bwd", part)}
        assert set(ar.resources) == {"comm:g0", "comm:g1", "comm:g2"}
    opt = next(a for a in sched.actions if a.kind == "optimizer" and a.device == "g1")
    assert {sched.actions[d].kind for d in opt.deps} == {"bwd", "allreduce"}


def test_schedule_actions_are_topologically_ordered() -> None:
    pipes = [_pipe(3, prefix=p) for p in ("a", "b")]
    buckets = [[SyncBucket(part=0, duration_s=1.0)] for _ in range(3)]
    for sched in (
        one_f_one_b(_pipe(3), 4),
        pipedream_async(_pipe(3), 2),
        wsp(pipes, 2, 1, buckets=buckets),
        parameter_server(
            [_pipe(1, prefix=p) for p in "xy"], ["ps0"], [PsWork(push_s=1, pull_s=1)] * 2
        ),
    ):
        for i, act in enumerate(sched.actions):
            assert all(d < i for d in act.deps)


def test_wsp_staleness_places_the_weight_update_later() -> None:
    pipes = [_pipe(2, batch=2, prefix=p) for p in ("a", "b")]
    buckets = [[SyncBucket(part=0, duration_s=1.0)] for _ in range(2)]
    sched = wsp(pipes, 2, 2, buckets=buckets)
    acts = compute_only(sched, "a0")
    first_o = next(i for i, a in enumerate(acts) if a.kind == "optimizer")
    # D = 2: wave 0's synchronised weights are applied before wave 3 (micro-batch 6) starts.
    assert acts[first_o + 1].kind == "fwd" and acts[first_o + 1].microbatch == 6


def test_async_ps_pushes_only_own_gradients() -> None:
    reps = [_pipe(1, prefix=p) for p in "xy"]
    sched = parameter_server(reps, ["ps"], [PsWork(push_s=1, pull_s=1)] * 2, asynchronous=True)
    for act in sched.actions:
        if act.kind == "ps_push":
            assert {sched.actions[d].device for d in act.deps} == {act.device}
    assert len(sched.marks) == 2


def test_builder_rejects_deadlock_and_unknown_dependency() -> None:
    b = ScheduleBuilder()
    common = {"kind": "fwd", "device": "d", "resources": ("compute:d",), "duration_s": 1.0}
    b.add("x", ["y"], **common)  # x runs first on the stream but waits for y: deadlock
    b.add("y", [], **common)
    with pytest.raises(ValueError, match="deadlock"):
        b.build(strategy="t", devices=["d"], samples_per_iteration=1)
    b2 = ScheduleBuilder()
    b2.add("x", ["nope"], **common)
    with pytest.raises(ValueError, match="unknown action"):
        b2.build(strategy="t", devices=["d"], samples_per_iteration=1)
