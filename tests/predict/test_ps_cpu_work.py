"""The parameter server's work on CPU ranks' cores (cost.ps_cpu) against closed forms."""

from __future__ import annotations

import dataclasses

import pytest
from predict_synthetic import BWD_PER_SAMPLE, FWD_PER_SAMPLE, FixedCompute, cluster, graph

from hetplan.cluster.spec import Cluster, Link
from hetplan.cost import comm
from hetplan.cost.comm_gloo import GLOO_ASYNC_OVERLAP
from hetplan.cost.ps_cpu import (
    COPY_BANDWIDTH,
    FRESH_BANDWIDTH,
    MESSAGE_CPU_S,
    MESSAGE_CPU_S_CORE_MATES,
    MMAP_THRESHOLD_BYTES,
    copy_s,
    messages_cpu_s,
    new_buffer_s,
    ps_cpu_work,
)
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.predict import predict
from hetplan.schedule import PipelineWork, PsWork, StageWork, parameter_server
from hetplan.simulate import simulate

MB = 1_000_000


def test_new_buffers_from_the_mmap_threshold_are_fresh_pages() -> None:
    small = MMAP_THRESHOLD_BYTES - 1
    assert new_buffer_s(small) == pytest.approx(small / COPY_BANDWIDTH)
    assert new_buffer_s(MMAP_THRESHOLD_BYTES) == pytest.approx(
        MMAP_THRESHOLD_BYTES / FRESH_BANDWIDTH
    )
    assert new_buffer_s(0) == copy_s(0) == 0.0


def test_synchronous_buffers_lengthen_push_and_pull() -> None:
    hosts = {"a": 10 * MB, "b": 40 * MB}
    work = ps_cpu_work(hosts, ["a", "b"], {"a": 1.0, "b": 0.5}, asynchronous=False)
    build = 10 * MB / COPY_BANDWIDTH + 40 * MB / FRESH_BANDWIDTH  # one flat buffer per host
    assert work.push_s["a"] == pytest.approx(build + 10 * MB / COPY_BANDWIDTH)
    assert work.push_s["b"] == pytest.approx((build + 40 * MB / COPY_BANDWIDTH) / 0.5)
    # the pull refills the push's buffers (copies, no fresh pages), then copies them out
    assert work.pull_s["a"] == pytest.approx(2 * 50 * MB / COPY_BANDWIDTH)
    assert work.server_s == {}


def test_asynchronous_server_applies_every_workers_push() -> None:
    s = 40 * MB
    work = ps_cpu_work(
        {"a": s}, ["a", "b", "c"], dict.fromkeys("abc", 0.5), asynchronous=True,
        optimizer_s={"a": 0.01},
    )  # fmt: skip
    per_push = 3 * s / FRESH_BANDWIDTH + s / COPY_BANDWIDTH + 0.01
    assert work.server_s == {"a": pytest.approx(3 * per_push / 0.5)}
    assert work.push_s["b"] == pytest.approx(s / FRESH_BANDWIDTH / 0.5)
    # b receives into a new buffer and copies; a takes its reply from the queue; both wait
    # for their push's application.
    assert work.pull_s["b"] == pytest.approx(
        (s / FRESH_BANDWIDTH + s / COPY_BANDWIDTH) / 0.5 + per_push / 0.5
    )
    assert work.pull_s["a"] == pytest.approx(s / COPY_BANDWIDTH / 0.5 + per_push / 0.5)


def test_bounded_staleness_runs_at_the_slowest_workers_pace() -> None:
    reps = [
        PipelineWork(stages=(StageWork(devices=(w,), fwd_s=f, bwd_s=2 * f, opt_s=o),), batch=8)
        for w, f, o in (("a", 1.0, 2.0), ("b", 0.5, 0.0))
    ]
    work = [PsWork(push_s=0.5, pull_s=0.25), PsWork(push_s=0.5, pull_s=0.25)]
    free = simulate(parameter_server(reps, ["a"], work, asynchronous=True))
    assert free.samples_per_s == pytest.approx(8 / 5.75 + 8 / 2.25)  # each alone
    ssp = simulate(parameter_server(reps, ["a"], work, asynchronous=True, staleness=1))
    # b may run one iteration ahead of a, no more: both at a's period, 5.75 s.
    assert ssp.iteration_time_s == pytest.approx(5.75)


def _cpu_cluster() -> Cluster:
    c = cluster(2)
    cpu = dataclasses.replace(c.devices[0].type, name="cpu", is_cpu=True)
    devices = tuple(dataclasses.replace(d, type=cpu, cpus=(i,)) for i, d in enumerate(c.devices))
    return dataclasses.replace(c, devices=devices)


def test_server_sharing_its_workers_core_closed_form() -> None:
    """Two CPU workers on their own cores; n0.0 hosts every byte (40 MB: fresh pages). Its
    server thread applies both pushes each iteration on n0.0's core, taking turns with n0.0's
    worker: the host's iteration is its compute, its push and pull (the wait for its own
    push's application included) and the other push's application."""
    params = 10 * MB // 4  # 4 layers of 10 MB: 40 MB served by n0.0
    g = graph(4, params=params)
    c = _cpu_cluster()
    batch = 8
    plan = Plan(
        model=ModelRef(name="syn"), strategy="ps", global_batch=2 * batch,
        pipelines=[
            PipelinePlan(stages=[StagePlan(layers=[f"l{i}" for i in range(4)], devices=[d])],
                         batch=batch)
            for d in ("n0.0", "n0.1")
        ],
        ps_devices=["n0.0"], ps_async=True, staleness=1,
    )  # fmt: skip
    pred = predict(plan, g, c, FixedCompute())
    total = 4 * 10 * MB
    links = comm.ps_sync_time([10 * MB] * 4, ["n0.0", "n0.1"], ["n0.0"], c)
    opt = 4 * params * 12.0 / (1e11 * 0.8)  # SGD over the whole model: p, g read, p written
    per_push = 3 * total / FRESH_BANDWIDTH + total / COPY_BANDWIDTH + opt
    compute = 4 * (FWD_PER_SAMPLE + BWD_PER_SAMPLE) * batch
    push = links.async_per_worker_s["n0.0"] / 2 + total / FRESH_BANDWIDTH
    pull = links.async_per_worker_s["n0.0"] / 2 + total / COPY_BANDWIDTH + per_push
    # The other worker's push applied on the host's core, and its push and reply (two
    # messages with a rank on another core).
    host = compute + push + pull + per_push + 2 * MESSAGE_CPU_S
    assert pred.iteration_time_s == pytest.approx(host, rel=1e-9)
    # The same plan on devices that are not CPUs: no buffers, no server thread on a core.
    other = predict(plan, g, cluster(2), FixedCompute()).iteration_time_s
    assert other == pytest.approx(compute + links.async_per_worker_s["n0.0"] + opt, rel=1e-9)


def test_synchronous_ps_on_cpu_ranks_is_priced_as_gloo_reduce_and_broadcast() -> None:
    """Two CPU ranks, each hosting one shard: per host a gloo reduce (W + 1 = 3 latency
    steps) and a broadcast (ceil(log2 2) = 1 step), the two hosts' calls overlapping by the
    measured factor. Lowering the measured collective step by dL shortens the iteration by
    exactly 2 hosts x 4 steps x dL / overlap. Data parallelism's ring takes the cap too: DDP's
    two buckets (layer 3's 10 MB past the first 1 MiB cap, then layers 2-0), 2 (W-1) = 2
    steps each, both on the critical path (a CPU rank's all-reduce runs on its own core)."""
    g = graph(4, params=10 * MB // 4)
    slow = Link(kind="test", bandwidth=10e9, latency_s=5e-3)  # a core-mates' ping-pong
    base = dataclasses.replace(_cpu_cluster(), intra_links={"n0": slow})
    stages = [
        PipelinePlan(stages=[StagePlan(layers=[f"l{i}" for i in range(4)], devices=[d])], batch=8)
        for d in ("n0.0", "n0.1")
    ]
    ps = Plan(
        model=ModelRef(name="syn"), strategy="ps", global_batch=16, pipelines=stages,
        ps_devices=["n0.0", "n0.1"],
    )  # fmt: skip
    dp = Plan(model=ModelRef(name="syn"), strategy="dp", global_batch=16, pipelines=stages)

    def time(plan: Plan, step: float) -> float:
        c = dataclasses.replace(base, collective_step_s=step)
        return predict(plan, g, c, FixedCompute()).iteration_time_s

    assert time(ps, 2e-3) - time(ps, 1e-3) == pytest.approx(2 * 4 * 1e-3 / GLOO_ASYNC_OVERLAP)
    assert time(dp, 2e-3) - time(dp, 1e-3) == pytest.approx(2 * 2 * 1e-3)


def test_each_message_costs_both_ranks_more_between_core_mates() -> None:
    """Hosts a, b; workers a, b, c; a and c share a core. Per iteration (hand count):
    a pushes to b and takes its reply (2 messages with b), and serves b and c (2 each);
    b pushes to a, serves a and c; c, no host, pushes to a and b."""
    cross, mate = MESSAGE_CPU_S, MESSAGE_CPU_S_CORE_MATES
    got = messages_cpu_s(
        ["a", "b"], ["a", "b", "c"], {"a": 0.5, "b": 1.0, "c": 0.5},
        core_mates=lambda x, y: {x, y} == {"a", "c"},
    )  # fmt: skip
    assert got["a"] == pytest.approx((2 * cross + 2 * cross + 2 * mate) / 0.5)
    assert got["b"] == pytest.approx(2 * cross + 2 * cross + 2 * cross)
    assert got["c"] == pytest.approx((2 * mate + 2 * cross) / 0.5)
    # Asynchronous work carries them; a host that is no worker adds its own to its server.
    work = ps_cpu_work(
        {"h": 1e3}, ["a"], {"a": 1.0, "h": 1.0}, asynchronous=True,
        core_mates=lambda x, y: False,
    )  # fmt: skip
    alone = ps_cpu_work({"h": 1e3}, ["a"], {"a": 1.0, "h": 1.0}, asynchronous=True)
    assert work.messages_s == {"a": pytest.approx(2 * cross)}
    assert work.server_s["h"] - alone.server_s["h"] == pytest.approx(2 * cross)
