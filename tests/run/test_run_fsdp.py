"""Sharded data parallelism (strategy ``fsdp``, torch's FSDP2) on real gloo processes (CPU):
losses and gradients equal the single-process reference on uneven batch shares, each rank
holds its shard, and checkpoints cross between sharded and unsharded plans (issue 29)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fsdp_entries import CountingSource
from test_run_checkpoint import check_crossings, close, losses, make_plan

from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.run.references.reference import reference_run, reference_step
from hetplan.run.setup.model import MLPSource, ZooSource, layer_names
from hetplan.run.train import run_plan

MLP = MLPSource(widths=(6, 10, 12, 5))
LAYERS = ["fc0", "act0", "fc1", "act1", "head"]


def _fsdp(batches: list[int], micro: int = 1, zero: int = 3, optimizer: str = "adam") -> Plan:
    return Plan(
        model=ModelRef(name="mlp"), strategy="fsdp", global_batch=sum(batches),
        micro_batches=micro, optimizer=optimizer,  # type: ignore[arg-type]
        pipelines=[
            PipelinePlan(stages=[StagePlan(layers=LAYERS, devices=[f"d{i}"])], batch=b)
            for i, b in enumerate(batches)
        ],
        zero=zero,
    )  # fmt: skip


@pytest.mark.parametrize(("micro", "zero"), [(1, 3), (2, 3), (1, 2)])
def test_three_uneven_ranks_equal_one_process(micro: int, zero: int) -> None:
    """7, 3 and 2 samples: the summed loss and every gradient (gathered from the shards)
    equal the single process on the 12 samples."""
    plan = _fsdp([7, 3, 2], micro=micro, zero=zero)
    raw = run_plan(plan, source=MLP, steps=1, seed=3, return_grads=True)
    loss, grads = reference_step(plan, MLP, seed=3)
    got = sum(r.loss[0] for r in raw if r.loss[0] is not None)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(loss))
    for r in raw:
        assert set(r.grads) == set(grads)
        for name, g in r.grads.items():
            torch.testing.assert_close(g, grads[name], msg=f"rank {r.rank} {name}")


def test_trains_to_the_one_process_losses_and_holds_its_shard() -> None:
    plan = _fsdp([7, 3, 2])
    raw = run_plan(plan, source=MLP, steps=4, seed=5)
    ref, _ = reference_run(plan, MLP, seed=5, steps=4)
    close(losses(raw), ref)
    # every rank holds FSDP2's padded shard of each layer, nothing else (no buffers): rows
    # 10, 12, 5 cut in chunks of 4, 4, 2 on 3 ranks, fp32 -> (4*6+4 + 4*10+4 + 2*12+2) * 4 B
    assert [r.held_state_bytes for r in raw] == [392] * 3


def test_checkpoints_cross_between_sharded_and_unsharded_plans(tmp_path: Path) -> None:
    """fsdp -> dp and fsdp -> gpipe, and a gpipe checkpoint resumed by fsdp: the losses of the
    single process resumed from the same checkpoint."""
    sharded = make_plan([5], [20, 8, 4], "fsdp", micro=1)
    check_crossings(
        tmp_path,
        [
            (sharded, make_plan([5], [20, 12], "dp"), "to-dp"),
            (sharded, make_plan([2, 3], [32], "gpipe"), "to-gpipe"),
            (make_plan([2, 3], [32], "gpipe"), sharded, "from-gpipe"),
        ],
    )


def test_no_rank_builds_a_whole_replica(tmp_path: Path) -> None:
    """gpt-tiny on 3 ranks: the set-up materialises the model a chunk at a time, each at most
    a third of the model's bytes or its largest tensor, never the whole (the whole counted
    here by building it in this process)."""
    source = CountingSource(name="gpt-tiny", log=str(tmp_path / "built"))
    whole_model = ZooSource(name="gpt-tiny").build(0, "cpu")
    tensors = [*whole_model.parameters(), *whole_model.buffers()]
    whole = sum(t.numel() * t.element_size() for t in tensors)
    largest = max(t.numel() * t.element_size() for t in tensors)
    layers = layer_names(source)
    plan = Plan(
        model=ModelRef(name="gpt-tiny"), strategy="fsdp", global_batch=6,
        pipelines=[PipelinePlan(stages=[StagePlan(layers=layers, devices=[f"d{i}"])], batch=2)
                   for i in range(3)],
    )  # fmt: skip
    run_plan(plan, source=source, steps=1)
    logs = list(tmp_path.glob("built.*"))
    assert len(logs) == 3  # one per rank
    for log in logs:
        calls = [int(x) for x in log.read_text().split()]
        assert len(calls) > 1 and sum(calls) >= whole  # every tensor, in several chunks
        assert max(calls) <= max(largest, whole // 3) + largest < whole
