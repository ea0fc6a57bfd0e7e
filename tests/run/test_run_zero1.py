"""ZeRO-1 (strategy ``fsdp``, ``zero: 1``: torch's ZeroRedundancyOptimizer over hetplan's
gradient all-reduce) on real gloo processes (CPU): losses and gradients equal the
single-process reference on uneven batch shares, each rank keeps the optimizer state of the
parameters it owns only, and checkpoints cross to and from unsharded plans (issue 29)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from test_run_checkpoint import check_crossings, close, losses, make_plan
from test_run_fsdp import MLP, _fsdp

from hetplan.run.references.reference import reference_run, reference_step
from hetplan.run.train import run_plan


@pytest.mark.parametrize("optimizer", ["adam", "momentum"])
def test_three_uneven_ranks_train_to_the_one_process_losses(optimizer: str) -> None:
    """7, 3 and 2 samples, 4 steps: the losses of one process on the 12 samples."""
    plan = _fsdp([7, 3, 2], zero=1, optimizer=optimizer)
    raw = run_plan(plan, source=MLP, steps=4, seed=5)
    ref, _ = reference_run(plan, MLP, seed=5, steps=4)
    close(losses(raw), ref)


def test_gradients_are_the_one_process_gradients() -> None:
    plan = _fsdp([7, 3, 2], micro=2, zero=1)
    raw = run_plan(plan, source=MLP, steps=1, seed=3, return_grads=True)
    _, grads = reference_step(plan, MLP, seed=3)
    for r in raw:
        for name, g in r.grads.items():
            torch.testing.assert_close(g, grads[name], msg=f"rank {r.rank} {name}")


def test_each_rank_keeps_the_adam_state_of_its_owned_parameters() -> None:
    """The MLP's tensors have 120 (fc1.weight), 60 (fc0.weight), 60 (head.weight), 12, 10 and
    5 elements; torch's partition (largest first, each to the rank with the fewest elements
    so far, the first such rank on ties) gives 3 ranks 120 | 60 + 12 | 60 + 10 + 5 elements.
    Adam keeps two fp32 slots per element and a 4-byte step per tensor (hand count)."""
    raw = run_plan(_fsdp([7, 3, 2], zero=1), source=MLP, steps=2, seed=1)
    owned = {0: (120, 1), 1: (72, 2), 2: (75, 3)}  # rank: (elements, tensors)
    expected = {r: 2 * 4 * n + 4 * t for r, (n, t) in owned.items()}
    assert {r.rank: r.optimizer_state_bytes for r in raw} == expected


def test_checkpoints_cross_between_zero1_and_unsharded_plans(tmp_path: Path) -> None:
    """zero-1 -> dp, zero-1 -> gpipe and gpipe -> zero-1: the losses of the single process
    resumed from the same checkpoint (each owner wrote its slots; a reader loads its own)."""
    zero1 = replace(make_plan([5], [20, 8, 4], "fsdp", micro=1), zero=1)
    check_crossings(
        tmp_path,
        [
            (zero1, make_plan([5], [20, 12], "dp"), "to-dp"),
            (zero1, make_plan([2, 3], [32], "gpipe"), "to-gpipe"),
            (make_plan([2, 3], [32], "gpipe"), zero1, "from-gpipe"),
        ],
    )
