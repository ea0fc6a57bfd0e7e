"""Tensor parallelism inside stages trains the same network as one process (real processes,
gloo, CPU): Megatron-style attention and MLP splits, the vocabulary-split embedding and head
with the loss under ``loss_parallel()``, combined with pipeline and data parallelism."""

from __future__ import annotations

import dataclasses

import pytest
from test_run_fidelity import check_same_training, make_plan

from hetplan.plan.types import Plan


def _tp(family: str, stages: int, tp: int = 2, optimizer: str = "momentum") -> Plan:
    plan = make_plan("gpt-tiny", family, stages, optimizer=optimizer)
    dev = iter(f"d{i}" for i in range(32))
    pipes = [
        dataclasses.replace(
            p,
            stages=[
                dataclasses.replace(s, devices=[next(dev) for _ in range(tp)]) for s in p.stages
            ],
        )
        for p in plan.pipelines
    ]
    return dataclasses.replace(plan, pipelines=pipes, tp=tp)


@pytest.mark.parametrize(("family", "stages"), [("1f1b", 2), ("dp", 1), ("gpipe", 1)])
def test_tensor_parallel_trains_the_same_network(family: str, stages: int) -> None:
    check_same_training(_tp(family, stages), "gpt-tiny")
