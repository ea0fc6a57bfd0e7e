"""Pipelines of sharded stages (strategy ``hybrid`` with ``shard_stages``: each stage's
replicas shard it with FSDP2, as torchtitan composes pipelining with FSDP2) on real gloo
processes (CPU): losses and gradients equal the single-process reference on uneven batch
shares, each rank holds its shard of its stage, and checkpoints cross to unsharded plans
(issue 29)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from test_run_checkpoint import check_crossings, close, losses, make_plan
from test_run_fsdp import MLP

from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.run.references.reference import reference_run, reference_step
from hetplan.run.train import run_plan

STAGES = [["fc0", "act0"], ["fc1", "act1", "head"]]


def _sharded(batches: list[int], micro: int = 2, zero: int = 3) -> Plan:
    dev = iter(f"d{i}" for i in range(16))
    return Plan(
        model=ModelRef(name="mlp"), strategy="hybrid", global_batch=sum(batches),
        micro_batches=micro, optimizer="adam", zero=zero, shard_stages=True,
        pipelines=[
            PipelinePlan(stages=[StagePlan(layers=s, devices=[next(dev)]) for s in STAGES],
                         batch=b)
            for b in batches
        ],
    )  # fmt: skip


@pytest.mark.parametrize(("micro", "zero"), [(1, 3), (2, 3), (2, 2)])
def test_two_uneven_pipelines_equal_one_process(micro: int, zero: int) -> None:
    """Pipelines of 6 and 4 samples: the summed loss and every gradient (gathered from the
    shards) equal the single process on the 10 samples."""
    plan = _sharded([6, 4], micro=micro, zero=zero)
    raw = run_plan(plan, source=MLP, steps=1, seed=3, return_grads=True)
    loss, grads = reference_step(plan, MLP, seed=3)
    got = sum(r.loss[0] for r in raw if r.loss[0] is not None)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(loss))
    for r in raw:
        for name, g in r.grads.items():
            torch.testing.assert_close(g, grads[name], msg=f"rank {r.rank} {name}")


def test_trains_to_the_one_process_losses_and_holds_its_stage_shard() -> None:
    plan = _sharded([6, 4])
    raw = run_plan(plan, source=MLP, steps=4, seed=5)
    ref, _ = reference_run(plan, MLP, seed=5, steps=4)
    close(losses(raw), ref)
    # 2 ranks per stage, FSDP2's padded dim-0 halves, fp32: stage 0 fc0 (10 x 6 + 10) ->
    # (5 * 6 + 5) * 4 B; stage 1 fc1 (12 x 10 + 12) and head (5 x 12 + 5) ->
    # (6 * 10 + 6 + 3 * 12 + 3) * 4 B
    held = {(r.pipeline, r.stage): r.held_state_bytes for r in raw}
    assert held == {(0, 0): 140, (1, 0): 140, (0, 1): 420, (1, 1): 420}


def test_checkpoints_cross_to_and_from_unsharded_plans(tmp_path: Path) -> None:
    sharded = replace(make_plan([2, 3], [16, 16], "hybrid"), shard_stages=True)
    check_crossings(
        tmp_path,
        [
            (sharded, make_plan([5], [20, 12], "dp"), "to-dp"),
            (make_plan([2, 3], [32], "gpipe"), sharded, "from-gpipe"),
        ],
    )
