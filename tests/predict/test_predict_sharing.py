"""Processes sharing a core: effective speed from the simulated overlap (predict.sharing)."""

from __future__ import annotations

import dataclasses

import pytest
from predict_synthetic import FixedCompute, cluster, graph

from hetplan.cluster.spec import Cluster
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.planspec.trace import Span
from hetplan.predict import predict
from hetplan.predict.sharing import (
    TIME_SLICE_TAX,
    busy_overlap,
    core_groups,
    shared_speeds,
    tp_ranks,
)

REF = ModelRef(name="syn")


def _pinned(speeds: tuple[float, ...], cpus: tuple[tuple[int, ...] | None, ...]) -> Cluster:
    c = cluster(len(speeds), speeds=speeds)
    devices = tuple(dataclasses.replace(d, cpus=p) for d, p in zip(c.devices, cpus, strict=True))
    return dataclasses.replace(c, devices=devices)


def _plan(strategy: str, stages: list[list[str]], devices: list[str], m: int, b: int) -> Plan:
    if strategy == "dp":
        pipes = [
            PipelinePlan(stages=[StagePlan(layers=stages[0], devices=[d])], batch=b)
            for d in devices
        ]
        return Plan(model=REF, strategy="dp", global_batch=b * len(devices), pipelines=pipes)
    st = [StagePlan(layers=ls, devices=[d]) for ls, d in zip(stages, devices, strict=True)]
    return Plan(
        model=REF, strategy=strategy, global_batch=b, micro_batches=m,
        pipelines=[PipelinePlan(stages=st, batch=b)],
    )  # fmt: skip


class _Timeline:
    def __init__(self, spans: list[Span]) -> None:
        self._spans = spans

    def spans(self) -> list[Span]:
        return self._spans


def _op(device: str, kind: str, start: float, end: float) -> Span:
    return Span(device=device, kind=kind, stage=0, microbatch=0, start=start, end=end)


def test_overlap_weighted_by_time() -> None:
    # a computes [0, 2], b computes [1, 3]: each is alone half of its time, together the
    # other half, so k = (1 * 1 + 1 * 2) / 2 = 1.5 for both
    ops = [_op("a", "fwd", 0.0, 2.0), _op("b", "bwd", 1.0, 3.0),
           _op("c", "fwd", 0.0, 3.0), _op("a", "send", 2.0, 9.0)]  # fmt: skip
    k = busy_overlap(_Timeline(ops), ["a", "b"])  # type: ignore[arg-type]
    assert k == pytest.approx({"a": 1.5, "b": 1.5})


def test_a_tensor_parallel_stage_computes_on_every_rank_of_its_group() -> None:
    # The timeline puts a TP stage's spans on its first rank; both ranks of the group [a, b]
    # compute them. Alone, a looks like it has the core to itself (k = 1) and b never computes.
    plan = Plan(
        model=REF, strategy="dp", global_batch=8, tp=2,
        pipelines=[PipelinePlan(stages=[StagePlan(layers=["l0"], devices=["a", "b"])], batch=8)],
    )  # fmt: skip
    assert tp_ranks(plan) == {"a": ["a", "b"]}
    ops = [_op("a", "fwd", 0.0, 2.0), _op("a", "bwd", 2.0, 6.0)]
    timeline = _Timeline(ops)
    assert busy_overlap(timeline, ["a", "b"]) == pytest.approx({"a": 1.0})  # type: ignore[arg-type]
    k = busy_overlap(timeline, ["a", "b"], tp_ranks(plan))  # type: ignore[arg-type]
    assert k == pytest.approx({"a": 2.0, "b": 2.0})
    # two to a core of capacity 1: each gets half of it, less the time-slice tax
    speeds = shared_speeds(timeline, [(["a", "b"], 1.0)], tp_ranks(plan))  # type: ignore[arg-type]
    assert speeds == pytest.approx(dict.fromkeys("ab", 0.5 * (1 - TIME_SLICE_TAX)))


def test_core_groups_count_members_in_the_plan_and_capacity_of_all() -> None:
    c = _pinned((1.0, 0.5, 0.5), ((0,), (1,), (1,)))
    assert core_groups(c, ["n0.0", "n0.1", "n0.2"]) == [(["n0.1", "n0.2"], 1.0)]
    assert core_groups(c, ["n0.0", "n0.1"]) == []  # alone on its core in this plan


def test_pipeline_stages_sharing_a_core_never_overlap_with_one_micro_batch() -> None:
    # GPipe with one micro-batch: stage 0 and stage 1 never compute at the same time, so each
    # process has the whole core: the same as two devices of speed 1.
    g = graph(2, params=0)  # no optimizer step (it would run on both at once)
    plan = _plan("gpipe", [["l0"], ["l1"]], ["n0.0", "n0.1"], 1, 8)
    shared = predict(plan, g, _pinned((0.5, 0.5), ((1,), (1,))), FixedCompute())
    full = predict(plan, g, cluster(2, speeds=(1.0, 1.0)), FixedCompute())
    assert shared.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-9)


def test_data_parallel_ranks_sharing_a_core_keep_their_share_less_the_switching() -> None:
    # Both replicas compute all the time at the same time: each gets half of the core, less
    # the switching tax paid all of that time.
    g = graph(2, params=0)
    plan = _plan("dp", [["l0", "l1"]], ["n0.0", "n0.1"], 1, 8)
    shared = predict(plan, g, _pinned((0.5, 0.5), ((1,), (1,))), FixedCompute())
    taxed = 0.5 * (1 - TIME_SLICE_TAX)
    declared = predict(plan, g, cluster(2, speeds=(taxed, taxed)), FixedCompute())
    assert shared.iteration_time_s == pytest.approx(declared.iteration_time_s, rel=1e-9)


def test_the_switching_tax_grows_with_the_time_shared() -> None:
    # a alone on the core for 1 s, then with b for 1 s: k = 1.5, so a gets 1 / 1.5 of the
    # core, less half the tax; b, always beside a, gets 1 / 2 less all of it
    ops = [_op("a", "fwd", 0.0, 2.0), _op("b", "fwd", 1.0, 2.0)]
    speeds = shared_speeds(_Timeline(ops), [(["a", "b"], 1.0)])  # type: ignore[arg-type]
    assert speeds["a"] == pytest.approx(1 / 1.5 * (1 - TIME_SLICE_TAX / 2))
    assert speeds["b"] == pytest.approx(1 / 2 * (1 - TIME_SLICE_TAX))
    alone = shared_speeds(_Timeline([_op("a", "fwd", 0.0, 1.0)]), [(["a", "b"], 1.0)])  # type: ignore[arg-type]
    assert alone == {"a": 1.0}  # no core-mate computing: the whole core, no tax


def test_pipeline_with_overlap_lies_between_the_bounds() -> None:
    g = graph(2, params=0)
    plan = _plan("gpipe", [["l0"], ["l1"]], ["n0.0", "n0.1"], 4, 8)
    shared = predict(plan, g, _pinned((0.5, 0.5), ((1,), (1,))), FixedCompute()).iteration_time_s
    taxed = 0.5 * (1 - TIME_SLICE_TAX)  # both computing all the time
    slow = predict(plan, g, cluster(2, speeds=(taxed, taxed)), FixedCompute()).iteration_time_s
    fast = predict(plan, g, cluster(2, speeds=(1.0, 1.0)), FixedCompute()).iteration_time_s
    assert fast < shared < slow
