"""Tensor parallelism inside stages trains the same network as one process (real processes,
gloo, CPU): Megatron-style attention and MLP splits, the vocabulary-split embedding and head
with the loss under ``loss_parallel()``, combined with pipeline and data parallelism."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from test_run_fidelity import _source, check_same_training, make_plan

from hetplan.planspec import Plan
from hetplan.run.references.reference import reference_run
from hetplan.run.setup.checkpoint import step_dir
from hetplan.run.train import Training, run_plan


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


@pytest.mark.parametrize(
    ("family", "stages"), [("1f1b", 2), ("dp", 1), ("gpipe", 1), ("hybrid", 2)]
)
def test_tensor_parallel_trains_the_same_network(family: str, stages: int) -> None:
    check_same_training(_tp(family, stages), "gpt-tiny")


def test_checkpoints_cross_between_tensor_parallel_and_plain_plans(tmp_path: Path) -> None:
    """A tensor-parallel plan's checkpoint (sharded weights and optimizer state, written with
    DCP) resumed by a plain pipeline, and the other way round: each equals one process resumed
    from the same checkpoint."""
    source = _source("gpt-tiny")
    split = _tp("1f1b", 2)
    plain = make_plan("gpt-tiny", "1f1b", 2, optimizer="momentum")
    for first, then in ((split, plain), (plain, split)):
        ckpt = tmp_path / f"ck-{first.tp}"
        run_plan(first, source=source, steps=2, seed=4, training=Training(checkpoint_dir=ckpt))
        got = run_plan(then, source=source, steps=2, seed=4, training=Training(resume=ckpt))
        ref, _ = reference_run(then, source, seed=4, steps=2, resume=step_dir(ckpt, 2))
        losses = [sum(r.loss[i] for r in got if r.loss[i] is not None) for i in range(2)]
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref), rtol=1e-5, atol=1e-6)
