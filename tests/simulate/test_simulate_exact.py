"""The simulator against closed forms and hand-computed timelines."""

from __future__ import annotations

import pytest

from hetplan.schedule import (
    CutWork,
    PipelineWork,
    PsWork,
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


def _homog(num: int, m: int, f: float, b: float) -> PipelineWork:
    stages = tuple(StageWork(devices=(f"d{i}",), fwd_s=f, bwd_s=b) for i in range(num))
    return PipelineWork(stages=stages, batch=m)


@pytest.mark.parametrize("gen", [gpipe, one_f_one_b])
@pytest.mark.parametrize(("num", "m"), [(1, 1), (1, 5), (2, 1), (4, 4), (4, 16), (8, 3), (5, 32)])
def test_homogeneous_pipeline_matches_gpipe_eq_6_1(gen: object, num: int, m: int) -> None:
    f, b = 0.0123, 0.0271  # per stage, per micro-batch
    # T_seq: one mini-batch (m micro-batches) through all W stages on one device, in sequence.
    t_seq = m * num * (f + b)
    expected = t_seq * (num + m - 1) / (num * m)  # source 003, Eq. 6.1
    tl = simulate(gen(_homog(num, m, f, b), m))  # type: ignore[operator]
    assert tl.iteration_time_s == pytest.approx(expected, rel=0, abs=1e-9)
    # The bubble fraction of GPipe is (W - 1) / (W + m - 1) on every device.
    assert tl.bubble_fraction == pytest.approx((num - 1) / (num + m - 1), abs=1e-9)
    assert tl.exposed_comm_s == 0.0


def _ring(nbytes: float, world: int, bw: float, lat: float) -> float:
    return 2 * (world - 1) / world * nbytes / bw + 2 * (world - 1) * lat


@pytest.mark.parametrize("world", [2, 3, 8])
def test_data_parallel_without_overlap_is_compute_plus_ring_allreduce(world: int) -> None:
    f, b, opt = 0.010, 0.021, 0.002
    nbytes, bw, lat = 100e6, 10e9, 5e-6
    ar = _ring(nbytes, world, bw, lat)
    reps = [
        PipelineWork(stages=(StageWork(devices=(f"g{r}",), fwd_s=f, bwd_s=b, opt_s=opt),), batch=32)
        for r in range(world)
    ]
    tl = simulate(data_parallel(reps, [SyncBucket(part=0, duration_s=ar, nbytes=nbytes)]))
    assert tl.iteration_time_s == pytest.approx(f + b + ar + opt, rel=0, abs=1e-12)
    assert tl.samples_per_s == pytest.approx(32 * world / (f + b + ar + opt))
    for dev in tl.devices.values():
        assert dev.exposed_comm_s == pytest.approx(ar, abs=1e-12)
        assert dev.bubble_s == pytest.approx(0.0, abs=1e-12)


def test_bucketed_overlap_exposes_only_the_tail() -> None:
    # Backward in 3 parts of 1 s; buckets of 0.5 s ready after parts 0, 1, 2: the first two
    # hide under the next part, the last one is exposed (0.5 s).
    reps = [
        PipelineWork(stages=(StageWork(devices=(f"g{r}",), fwd_s=1, bwd_s=3, bwd_parts=(1, 1, 1)),))
        for r in range(2)
    ]
    buckets = [SyncBucket(part=k, duration_s=0.5) for k in range(3)]
    tl = simulate(data_parallel(reps, buckets))
    assert tl.iteration_time_s == pytest.approx(1 + 3 + 0.5)
    assert tl.devices["g0"].exposed_comm_s == pytest.approx(0.5)
    # Buckets longer than the parts queue on the comm stream: 1.5 s each, ready at 2, 3, 4:
    # they run 2-3.5, 3.5-5, 5-6.5 -> exposed 2.5 s after the backward ends at 4.
    slow = [SyncBucket(part=k, duration_s=1.5) for k in range(3)]
    tl = simulate(data_parallel(reps, slow))
    assert tl.iteration_time_s == pytest.approx(6.5)
    assert tl.devices["g1"].exposed_comm_s == pytest.approx(2.5)


def test_straggler_replica_turns_into_bubble_on_the_fast_one() -> None:
    fast = PipelineWork(stages=(StageWork(devices=("a",), fwd_s=1, bwd_s=2),), batch=16)
    slow = PipelineWork(stages=(StageWork(devices=("b",), fwd_s=2, bwd_s=4),), batch=16)
    tl = simulate(data_parallel([fast, slow], [SyncBucket(part=0, duration_s=1.0)]))
    assert tl.iteration_time_s == pytest.approx(7.0)
    assert tl.devices["a"].bubble_s == pytest.approx(3.0)
    assert tl.devices["a"].exposed_comm_s == pytest.approx(1.0)
    assert tl.devices["a"].busy_fraction == pytest.approx(3 / 7)
    assert tl.devices["b"].bubble_s == pytest.approx(0.0)


def test_pipeline_transfers_without_overlap_add_per_hop() -> None:
    # One micro-batch through 3 stages: every hop is on the critical path, both directions.
    stages = tuple(StageWork(devices=(f"d{i}",), fwd_s=1, bwd_s=2) for i in range(3))
    cuts = (CutWork(fwd_s=0.25, bwd_s=0.5), CutWork(fwd_s=0.125, bwd_s=0.0625))
    tl = simulate(gpipe(PipelineWork(stages=stages, cuts=cuts, batch=1), 1))
    assert tl.iteration_time_s == pytest.approx(3 * 3 + 0.25 + 0.5 + 0.125 + 0.0625)
    # Stage 0 idles while the transfers of its own link run: exposed = its two hops.
    assert tl.devices["d0"].exposed_comm_s == pytest.approx(0.25 + 0.5)


def test_async_pipedream_period_is_the_bottleneck_stage() -> None:
    costs = [(1.0, 2.0), (2.0, 3.0), (0.5, 1.0)]
    stages = tuple(
        StageWork(devices=(f"d{i}",), fwd_s=f, bwd_s=b) for i, (f, b) in enumerate(costs)
    )
    m = 4
    tl = simulate(pipedream_async(PipelineWork(stages=stages, batch=8), m))
    assert tl.iteration_time_s == pytest.approx(m * 5.0)
    assert tl.devices["d1"].busy_fraction == pytest.approx(1.0)
    assert tl.devices["d0"].busy_fraction == pytest.approx(3.0 / 5.0)


def test_wsp_staleness_hides_synchronisation() -> None:
    def run(staleness: int, ar: float) -> float:
        pipes = [
            PipelineWork(
                stages=tuple(StageWork(devices=(f"{p}{i}",), fwd_s=1, bwd_s=2) for i in range(2)),
                batch=4,
            )
            for p in "ab"
        ]
        buckets = [[SyncBucket(part=0, duration_s=ar)] for _ in range(2)]
        return simulate(wsp(pipes, 4, staleness, buckets=buckets)).iteration_time_s

    free = run(0, 0.0)
    assert free == pytest.approx(4 * 3.0)  # no sync cost: 1F1B steady state, m * (f + b)
    # A sync as long as a wave stalls D = 0 but hides under the next wave with D = 1.
    assert run(0, 12.0) > free + 1.0
    assert run(1, 6.0) == pytest.approx(free)
    assert run(3, 12.0) <= run(0, 12.0)


def test_sync_parameter_server_closed_form() -> None:
    reps = [
        PipelineWork(stages=(StageWork(devices=(w,), fwd_s=f, bwd_s=2 * f),), batch=8)
        for w, f in (("a", 1.0), ("b", 1.5))
    ]
    work = [PsWork(push_s=0.5, pull_s=0.25), PsWork(push_s=0.5, pull_s=0.75)]
    tl = simulate(parameter_server(reps, ["ps"], work))
    # Slowest worker's compute (4.5), the push phase (0.5), then the slowest pull (0.75).
    assert tl.iteration_time_s == pytest.approx(4.5 + 0.5 + 0.75)
    assert tl.devices["a"].bubble_s == pytest.approx(1.5 + 0.5)  # waits for b, then b's pull
    assert tl.devices["ps"].compute_s == 0.0
    asyn = simulate(
        parameter_server(reps, ["ps"], [PsWork(push_s=0.5, pull_s=0.25)] * 2, asynchronous=True)
    )
    # Each worker cycles alone: throughput = 8 / 3.75 + 8 / 5.25.
    assert asyn.samples_per_s == pytest.approx(8 / 3.75 + 8 / 5.25)


def test_async_pipedream_period_is_bounded_by_the_1f1b_round_trip() -> None:
    # 1F1B keeps S = 2 micro-batches in flight at stage 0: F(j + 2) waits for B(j), whose
    # round trip is F + send + F + B + send back + B = 1 + 3 + 1 + 1 + 0.5 + 1 = 7.5 s per two
    # micro-batches: 3.75 s per micro-batch, above both the link (3 s) and compute (2 s) bounds.
    stages = tuple(StageWork(devices=(f"d{i}",), fwd_s=1.0, bwd_s=1.0) for i in range(2))
    pipe = PipelineWork(stages=stages, cuts=(CutWork(fwd_s=3.0, bwd_s=0.5),), batch=4)
    tl = simulate(pipedream_async(pipe, 4))
    assert tl.iteration_time_s == pytest.approx(4 * 3.75)
    d1 = tl.devices["d1"]
    assert d1.compute_s == pytest.approx(4 * 2.0)
    assert d1.exposed_comm_s + d1.bubble_s == pytest.approx(4 * 1.75)


def test_hybrid_bsp_each_stage_syncs_after_its_own_last_backward() -> None:
    # 2 replicas x 2 stages, GPipe order, f = 1, b = 2, m = 3. Both replicas: pipeline ends at
    # (f + b)(W + m - 1) = 12 on stage 0, stage 1's last backward ends at 12 - b = 10.
    # Stage 0 syncs 12 -> 12.5; stage 1 syncs 10 -> 15: the iteration is 15 (no optimizer cost).
    def pipe(p: str) -> PipelineWork:
        stages = tuple(StageWork(devices=(f"{p}{i}",), fwd_s=1.0, bwd_s=2.0) for i in range(2))
        return PipelineWork(stages=stages, batch=3)

    buckets = [[SyncBucket(part=0, duration_s=0.5)], [SyncBucket(part=0, duration_s=5.0)]]
    sched = synchronous("hybrid", [pipe("a"), pipe("b")], 3, order="gpipe", buckets=buckets)
    tl = simulate(sched)
    assert tl.iteration_time_s == pytest.approx(15.0)
    assert tl.devices["a1"].exposed_comm_s == pytest.approx(5.0)
    assert tl.devices["b0"].exposed_comm_s == pytest.approx(0.5)
    assert tl.devices["b0"].bubble_s == pytest.approx(15.0 - 9.0 - 0.5)
