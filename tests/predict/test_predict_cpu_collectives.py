"""On CPU ranks an overlapped gloo allreduce shares the rank's core with the backward: while
both run each goes at half speed (processor sharing), hand-played event by event; GPUs are not
affected."""

from __future__ import annotations

import dataclasses

import pytest
from predict_synthetic import FixedCompute, cluster, graph

from hetplan.cost.ps_cpu import COPY_BANDWIDTH
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.predict import predict
from hetplan.predict.cpu_overlap import CPU_COLLECTIVE_CORE_SHARE, shared_core


def test_backward_and_allreduces_take_turns_on_the_core() -> None:
    assert CPU_COLLECTIVE_CORE_SHARE == 0.5
    # Parts 10, 20, 30 ms; all-reduces 5, 50, 7 ms alone, bucket k ready after part k.
    #  0-10  part 0 alone.
    # 10-20  part 1 and bucket 0 at half speed: bucket 0 done (5 ms of work), part 1 5/20.
    # 20-35  part 1 alone (15 left): part 1 took 25.
    # 35-95  part 2 and bucket 1 at half speed: part 2 done (30), bucket 1 30/50.
    # 95-115 bucket 1 alone (20 left): 80 from its start; bucket 2 alone, 7.
    got = shared_core((0.010, 0.020, 0.030), (0.005, 0.050, 0.007))
    assert got.parts == pytest.approx((0.010, 0.025, 0.060))
    assert got.allreduce_s == pytest.approx((0.010, 0.080, 0.007))


def test_the_work_is_conserved() -> None:
    # Whatever the overlap, the core ends the last of either at the sum of their times
    # when the all-reduces never wait for a part (one bucket, ready after the first part).
    parts, comm = (0.004, 0.009, 0.002), (0.020,)
    got = shared_core(parts, comm)
    assert sum(got.parts[:1]) + got.allreduce_s[0] == pytest.approx(sum(parts) + sum(comm))
    assert sum(got.parts) == pytest.approx(0.004 + 2 * 0.011)  # the rest at half speed


def test_a_queued_bucket_waits_for_the_one_before() -> None:
    # Bucket 0 (30 ms) still runs when part 1 (2 ms) ends: bucket 1 starts at its end.
    #  0-1  part 0 alone. 1-5 part 1 and bucket 0 at half: part 1 done, bucket 0 2/30.
    #  5-33 bucket 0 alone (28 left); bucket 1 (4 ms) alone from 33.
    got = shared_core((0.001, 0.002), (0.030, 0.004))
    assert got.parts == pytest.approx((0.001, 0.004))
    assert got.allreduce_s == pytest.approx((0.032, 0.004))


def test_no_buckets_no_change() -> None:
    got = shared_core((0.01,), ())
    assert got.parts == (0.01,)
    assert got.allreduce_s == ()


def _spans(cpu: bool) -> tuple[list[float], list[float], float, float]:
    """(backward parts, all-reduce spans, optimizer s, iteration s) of rank 0 of a 2-rank dp
    plan whose four 1.2 MB layers make four 1 MiB-capped buckets, on devices named as CPUs or
    not."""
    c = cluster(2)
    if cpu:
        t = dataclasses.replace(c.devices[0].type, name="cpu-x")
        c = dataclasses.replace(c, devices=tuple(dataclasses.replace(d, type=t) for d in c.devices))
    g = graph(4, params=300_000)
    layers = [x.name for x in g.layers]
    pipes = [
        PipelinePlan(stages=[StagePlan(layers=layers, devices=[d.id])], batch=8) for d in c.devices
    ]
    plan = Plan(
        model=ModelRef(name="syn"), strategy="dp", global_batch=16, pipelines=pipes, bucket_mb=1.0
    )
    pred = predict(plan, g, c, FixedCompute())
    spans = sorted((s for s in pred.timeline.spans() if s.device == "n0.0"), key=lambda s: s.start)
    bwd = [s.end - s.start for s in spans if s.kind == "bwd"]
    comm = [s.end - s.start for s in spans if s.kind == "allreduce"]
    (opt,) = [s.end - s.start for s in spans if s.kind == "optimizer"]
    return bwd, comm, opt, pred.iteration_time_s


def test_cpu_ranks_share_the_core_and_gpus_do_not() -> None:
    bwd, comm, opt, _ = _spans(cpu=False)  # GPUs: NCCL on its own streams, the raw times
    assert len(comm) == 4 and len(bwd) >= 4  # buckets overlap the backward
    # On CPU ranks each 1.2 MB bucket (one layer's 300,000 fp32 gradients; below glibc's mmap
    # threshold, so filled at the copy bandwidth) is first flattened by the backward thread.
    flatten = 4 * 300_000 / COPY_BANDWIDTH  # seconds per bucket
    want = shared_core([b + flatten if k < 4 else b for k, b in enumerate(bwd)], comm)
    cpu_bwd, cpu_comm, cpu_opt, _ = _spans(cpu=True)
    assert cpu_bwd == pytest.approx(list(want.parts))
    assert cpu_comm == pytest.approx(list(want.allreduce_s))
    assert sum(cpu_bwd) > sum(bwd)
    # and after the all-reduces the four summed buckets are copied back before the step.
    assert cpu_opt - opt == pytest.approx(4 * flatten)
