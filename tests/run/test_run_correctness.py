"""One distributed step equals single-process training on the same global batch (gloo, CPU).

Loss: the sum over ranks of each rank's share of the global-batch mean. Gradients: every
parameter, from every rank that holds it (hybrid: each replica of a stage after the
data-parallel allreduce), equal to the reference's.
"""

from __future__ import annotations

import torch
from run_entries import TiedSource

from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.run.loop.job import RankResult
from hetplan.run.references.reference import reference_step
from hetplan.run.setup.model import MLPSource, ModelSource
from hetplan.run.train import run_plan

SOURCE = MLPSource(widths=(6, 10, 12, 5))
LAYERS = ["fc0", "act0", "fc1", "act1", "head"]
MODEL = ModelRef(name="mlp")


def _stage(layers: list[str], device: str) -> StagePlan:
    return StagePlan(layers=layers, devices=[device])


def _check(plan: Plan, source: ModelSource = SOURCE) -> list[RankResult]:
    raw = run_plan(plan, source=source, steps=1, seed=3, return_grads=True)
    loss, grads = reference_step(plan, source, seed=3)
    got = sum(r.loss[0] for r in raw if r.loss[0] is not None)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(loss))
    seen: set[str] = set()
    for r in raw:
        for name, g in r.grads.items():
            torch.testing.assert_close(g, grads[name], msg=f"rank {r.rank} {name}")
            seen.add(name)
    assert seen == set(grads)
    return raw


def test_dp_uneven_batches() -> None:
    plan = Plan(
        model=MODEL,
        strategy="dp",
        global_batch=10,
        pipelines=[
            PipelinePlan(stages=[_stage(LAYERS, "a")], batch=7),
            PipelinePlan(stages=[_stage(LAYERS, "b")], batch=3),
        ],
    )
    raw = _check(plan)
    assert all(len(r.grads) == 6 for r in raw)  # 3 linear layers x (weight, bias)


def test_dp_gradient_accumulation() -> None:
    # 3 micro-batches of uneven rank batches (7 -> 3+2+2, 5 -> 2+2+1): the accumulated
    # update still equals single-process training on the global batch.
    plan = Plan(
        model=MODEL,
        strategy="dp",
        global_batch=12,
        micro_batches=3,
        pipelines=[
            PipelinePlan(stages=[_stage(LAYERS, "a")], batch=7),
            PipelinePlan(stages=[_stage(LAYERS, "b")], batch=5),
        ],
    )
    _check(plan)


def test_gpipe_uneven_stages() -> None:
    plan = Plan(
        model=MODEL,
        strategy="gpipe",
        global_batch=8,
        micro_batches=4,
        pipelines=[
            PipelinePlan(stages=[_stage(LAYERS[:1], "a"), _stage(LAYERS[1:], "b")], batch=8)
        ],
    )
    raw = _check(plan)
    assert sorted(raw[0].grads) == ["fc0.bias", "fc0.weight"]


def test_1f1b_three_stages() -> None:
    plan = Plan(
        model=MODEL,
        strategy="1f1b",
        global_batch=12,
        micro_batches=3,
        pipelines=[
            PipelinePlan(
                stages=[_stage(LAYERS[:2], "a"), _stage(LAYERS[2:3], "b"), _stage(LAYERS[3:], "c")],
                batch=12,
            )
        ],
    )
    _check(plan)


def test_hybrid_two_pipelines_of_two_stages() -> None:
    plan = Plan(
        model=MODEL,
        strategy="hybrid",
        global_batch=12,
        micro_batches=2,
        pipelines=[
            PipelinePlan(
                stages=[_stage(LAYERS[:3], f"a{p}"), _stage(LAYERS[3:], f"b{p}")], batch=batch
            )
            for p, batch in enumerate([8, 4])
        ],
    )
    raw = _check(plan)
    # Both replicas of stage 0 hold the summed gradient (checked against the reference above).
    assert [(r.pipeline, r.stage) for r in raw] == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_weights_tied_across_stages_get_both_gradients() -> None:
    plan = Plan(
        model=MODEL,
        strategy="1f1b",
        global_batch=6,
        micro_batches=2,
        pipelines=[
            PipelinePlan(stages=[_stage(["inp", "act"], "a"), _stage(["mid", "out"], "b")], batch=6)
        ],
    )
    raw = _check(plan, TiedSource(widths=(5, 5)))
    # The reference names the tied tensor once ("inp.weight"); both stages hold its full
    # gradient (sum of both uses), so their copies stay equal after the update.
    assert "inp.weight" in raw[0].grads and "inp.weight" in raw[1].grads
