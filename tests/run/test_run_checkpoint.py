"""Training on a dataset, checkpoints and resume across plans (real processes, gloo, CPU).

The expected losses come from elsewhere: an uninterrupted run of the same plan, and the
single-process reference (:func:`hetplan.run.references.reference.reference_run`) started from the
same
checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.run.launch.spawn import RunError
from hetplan.run.loop.job import RankResult
from hetplan.run.references.reference import reference_run
from hetplan.run.setup.checkpoint import FAULT_ENV, LATEST, find_checkpoint, read_info, step_dir
from hetplan.run.setup.model import ZooSource, layer_names
from hetplan.run.train import Training, run_plan

EXAMPLE = Path(__file__).parents[2] / "examples" / "data" / "blobs.py"
MODEL = f"{EXAMPLE}:model"
DATA = f"{EXAMPLE}:dataset"
SOURCE = ZooSource(name=MODEL)


def make_plan(split: list[int], batches: list[int], strategy: str, micro: int = 2) -> Plan:
    """``split``: layers per stage; ``batches``: samples per pipeline."""
    layers = layer_names(SOURCE)
    bounds = [sum(split[:k]) for k in range(len(split) + 1)]
    stages = [layers[bounds[k] : bounds[k + 1]] for k in range(len(split))]
    dev = iter(f"d{i}" for i in range(16))
    pipes = [
        PipelinePlan(stages=[StagePlan(layers=s, devices=[next(dev)]) for s in stages], batch=b)
        for b in batches
    ]
    return Plan(
        model=ModelRef(name=MODEL),
        strategy=strategy,  # type: ignore[arg-type]
        global_batch=sum(batches),
        micro_batches=micro,
        pipelines=pipes,
        optimizer="adam",
    )


PLAN_A = make_plan([2, 3], [32], "gpipe")  # two stages, one pipeline
PLAN_B = make_plan([5], [20, 12], "dp")  # one stage, two replicas, uneven split


def losses(raw: list[RankResult]) -> list[float]:
    steps = len(raw[0].loss)
    return [sum(r.loss[i] for r in raw if r.loss[i] is not None) for i in range(steps)]


def close(a: list[float], b: list[float]) -> None:
    torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=1e-5, atol=1e-6)


def check_crossings(folder: Path, pairs: list[tuple[Plan, Plan, str]]) -> None:
    """Each (writer, reader, name): the reader resumed from the writer's checkpoint of 2 steps
    trains 2 more to the losses of the single process resumed from the same checkpoint."""
    for writer, reader, name in pairs:
        ckpt = folder / name
        run_plan(writer, source=SOURCE, steps=2, training=Training(data=DATA, checkpoint_dir=ckpt))
        got = run_plan(reader, source=SOURCE, steps=2, training=Training(data=DATA, resume=ckpt))
        ref, _ = reference_run(reader, SOURCE, steps=2, data=DATA, resume=step_dir(ckpt, 2))
        close(losses(got), ref)


@pytest.mark.parametrize("plan", [PLAN_A, PLAN_B], ids=["two-stage", "dp"])
def test_training_on_the_example_dataset_lowers_the_loss(plan: Plan) -> None:
    got = losses(run_plan(plan, source=SOURCE, steps=12, training=Training(data=DATA)))
    ref, _ = reference_run(plan, SOURCE, steps=12, data=DATA)
    close(got, ref)
    assert sum(got[-3:]) / 3 < 0.8 * sum(got[:3]) / 3  # it learns


def test_resume_same_plan_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    whole = losses(run_plan(PLAN_A, source=SOURCE, steps=6, training=Training(data=DATA)))
    ckpt = tmp_path / "ck"
    first = run_plan(
        PLAN_A,
        source=SOURCE,
        steps=3,
        training=Training(data=DATA, checkpoint_dir=ckpt, checkpoint_every=2),
    )
    assert sorted(p.name for p in ckpt.iterdir()) == [LATEST, "step-00000002", "step-00000003"]
    assert find_checkpoint(ckpt) == step_dir(ckpt, 3)
    rest = run_plan(PLAN_A, source=SOURCE, steps=3, training=Training(data=DATA, resume=ckpt))
    assert rest[0].first_step == 3
    close(losses(first) + losses(rest), whole)


def test_resume_under_another_plan(tmp_path: Path) -> None:
    """A's checkpoint at step 2, resumed by B (other stages, devices and batch split)."""
    ckpt = tmp_path / "ck"
    a = run_plan(PLAN_A, source=SOURCE, steps=5, training=Training(data=DATA))
    run_plan(PLAN_A, source=SOURCE, steps=2, training=Training(data=DATA, checkpoint_dir=ckpt))
    b = run_plan(PLAN_B, source=SOURCE, steps=3, training=Training(data=DATA, resume=ckpt))
    ref, _ = reference_run(PLAN_B, SOURCE, steps=3, data=DATA, resume=step_dir(ckpt, 2))
    close(losses(b), ref)
    close(losses(b), losses(a)[2:])  # the same samples and state: the same training


def test_a_run_killed_while_checkpointing_resumes_from_the_last_complete_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = losses(run_plan(PLAN_A, source=SOURCE, steps=5, training=Training(data=DATA)))
    ckpt = tmp_path / "ck"
    monkeypatch.setenv(FAULT_ENV, "4")  # rank 0 dies after writing step 4's data
    training = Training(data=DATA, checkpoint_dir=ckpt, checkpoint_every=2)
    with pytest.raises(RunError, match="rank 0"):
        run_plan(PLAN_A, source=SOURCE, steps=5, training=training)
    monkeypatch.delenv(FAULT_ENV)
    assert (ckpt / ".tmp-step-00000004").is_dir()  # the torn one is there, unpublished
    assert find_checkpoint(ckpt) == step_dir(ckpt, 2)
    assert read_info(step_dir(ckpt, 2)).position == 2 * PLAN_A.global_batch
    rest = run_plan(PLAN_A, source=SOURCE, steps=3, training=Training(data=DATA, resume=ckpt))
    close(losses(rest), whole[2:])


@pytest.mark.parametrize("name", ["tied_lm", "top_level"])
def test_resume_across_plans_with_tied_and_glue_parameters(name: str, tmp_path: Path) -> None:
    """A weight tied across two stages and a parameter outside every layer, written by one
    split and read by another (synthetic data: each plan draws its own batches, so the
    reference is the single process resumed from the same checkpoint under the same plan)."""
    source = ZooSource(name=f"{Path(__file__).with_name('fidelity_models.py')}:{name}")
    layers = layer_names(source)
    dev = iter(f"d{i}" for i in range(8))

    def plan(cut: int, batches: list[int], strategy: str) -> Plan:
        stages = [layers[:cut], layers[cut:]]
        pipes = [
            PipelinePlan(stages=[StagePlan(layers=s, devices=[next(dev)]) for s in stages], batch=b)
            for b in batches
        ]
        return Plan(
            model=ModelRef(name=source.name), strategy=strategy,  # type: ignore[arg-type]
            global_batch=sum(batches), micro_batches=2, pipelines=pipes, optimizer="adam",
        )  # fmt: skip

    a = plan(1, [8], "1f1b")
    b = plan(len(layers) - 1, [6, 2], "hybrid")
    ckpt = tmp_path / "ck"
    run_plan(a, source=source, steps=2, seed=4, training=Training(checkpoint_dir=ckpt))
    got = run_plan(b, source=source, steps=2, seed=4, training=Training(resume=ckpt))
    ref, _ = reference_run(b, source, seed=4, steps=2, resume=step_dir(ckpt, 2))
    close(losses(got), ref)
