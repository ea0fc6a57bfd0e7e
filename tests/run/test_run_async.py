"""Asynchronous PipeDream and HetPipe's WSP train as their schedules say: every step's loss
equals a single-process run that applies the same delayed updates
(:func:`hetplan.run.references.reference_delayed.delayed_reference_run`), with weight stashing, tied
weights across stages and the wave all-reduce (real processes, gloo, CPU)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from test_run_fidelity import _source, make_plan

from hetplan.planspec import Plan
from hetplan.run.loop.job import RankResult
from hetplan.run.references.reference import reference_run
from hetplan.run.references.reference_delayed import delayed_reference_run, stage_versions
from hetplan.run.train import run_plan

STEPS = 4


def _losses(raw: list[RankResult], steps: int) -> list[float]:
    return [sum(float(x) for r in raw if (x := r.loss[i]) is not None) for i in range(steps)]


def check_delayed(plan: Plan, name: str, steps: int = STEPS) -> list[float]:
    source = _source(name)
    raw = run_plan(plan, source=source, steps=steps, seed=3)
    want = delayed_reference_run(plan, source, seed=3, steps=steps)
    got = _losses(raw, steps)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-5, atol=1e-6)
    return got


def _pipedream(name: str, stages: int, micro: int) -> Plan:
    return dataclasses.replace(make_plan(name, "1f1b", stages, micro=micro), strategy="pipedream")


def _wsp(name: str, staleness: int) -> Plan:
    return dataclasses.replace(make_plan(name, "hybrid", 2), sync="wsp", staleness=staleness)


def test_versions_follow_the_schedule_by_hand() -> None:
    """PipeDream, 3 stages, 1 micro-batch per iteration: stage 0 runs 2 forwards ahead, so its
    micro-batch j reads version j - 2 (never below 0); the last stage is never stale."""
    plan = _pipedream("skip", 3, 1)
    v = stage_versions(plan, 5)[0]
    assert [v[0][j] for j in range(5)] == [0, 0, 0, 1, 2]
    assert [v[1][j] for j in range(5)] == [0, 0, 1, 2, 3]
    assert [v[2][j] for j in range(5)] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(("name", "stages", "micro"), [("skip", 3, 1), ("tied_lm", 3, 2)])
def test_pipedream_equals_delayed_reference(name: str, stages: int, micro: int) -> None:
    got = check_delayed(_pipedream(name, stages, micro), name)
    sync, _ = reference_run(make_plan(name, "1f1b", stages, micro=micro), _source(name), 3, STEPS)
    assert got[0] == pytest.approx(sync[0], rel=1e-5)  # the first step reads version 0
    assert abs(got[-1] - sync[-1]) > 1e-7  # later ones are stale: a different training


@pytest.mark.parametrize("staleness", [0, 1])
def test_wsp_equals_delayed_reference(staleness: int) -> None:
    check_delayed(_wsp("tied_lm", staleness), "tied_lm")


def test_pipedream_gpt_tiny() -> None:
    check_delayed(_pipedream("gpt-tiny", 3, 2), "gpt-tiny", steps=3)
