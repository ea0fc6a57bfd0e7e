"""The optimizer step priced from a measured profile when the compute model has one."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from predict_synthetic import FixedCompute, cluster, graph

from hetplan.cluster.spec import Device
from hetplan.graph.types import ModelGraph
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.predict import predict

OPT_S = 0.004  # s: the stub's measured SGD step of the whole model


class MeasuredOptimizer(FixedCompute):
    def __init__(self, timed: str | None) -> None:
        self.timed = timed

    def optimizer_s(
        self, graph: ModelGraph, device: Device, layers: Sequence[str] | None = None
    ) -> float | None:
        share = len(layers or graph.layers) / len(graph.layers)
        return OPT_S * share / device.speed

    def profiled_optimizer(self, graph: ModelGraph, device: Device) -> str | None:
        return self.timed


def _gpipe(optimizer: str) -> Plan:
    stages = [StagePlan(layers=["l0"], devices=["n0.0"]), StagePlan(layers=["l1", "l2", "l3"],
              devices=["n0.1"])]  # fmt: skip
    return Plan(model=ModelRef(name="syn"), strategy="gpipe", global_batch=4, micro_batches=1,
                pipelines=[PipelinePlan(stages=stages, batch=4)], optimizer=optimizer)  # fmt: skip


def _opt_ops(plan: Plan, compute: FixedCompute) -> dict[str, float]:
    pred = predict(plan, graph(4), cluster(2), compute)
    return {o.device: o.end - o.start for o in pred.timeline.spans() if o.kind == "optimizer"}


def test_measured_optimizer_step_per_stage() -> None:
    ops = _opt_ops(_gpipe("sgd"), MeasuredOptimizer("sgd"))
    assert ops == {"n0.0": pytest.approx(OPT_S / 4), "n0.1": pytest.approx(3 * OPT_S / 4)}


def test_measured_step_scaled_to_another_optimizer_by_bytes_per_parameter() -> None:
    ops = _opt_ops(_gpipe("adam"), MeasuredOptimizer("sgd"))
    ratio = 28.0 / 12.0  # Adam moves 7 x 4 B per parameter, SGD 3 x 4 B
    assert ops["n0.1"] == pytest.approx(3 * OPT_S / 4 * ratio)


def test_profile_without_optimizer_falls_back_to_the_analytical_step() -> None:
    measured = _opt_ops(_gpipe("sgd"), MeasuredOptimizer("none"))
    analytical = _opt_ops(_gpipe("sgd"), FixedCompute())
    assert measured == analytical
    assert analytical["n0.1"] == pytest.approx(3 * 1000 * 12 / (1e11 * 0.8))
