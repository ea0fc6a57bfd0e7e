"""Staleness bounds: checked against stage orders counted by hand and against the schedule
package's own 1F1B order with optimizer steps (independent code)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from hetplan.plan.staleness import is_asynchronous, staleness_of, staleness_text
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan, Strategy
from hetplan.schedule.pipeline import Op, insert_optimizer, stage_order


def _plan(strategy: Strategy, stages: int, m: int, replicas: int = 1, **kw: Any) -> Plan:
    pipes = [
        PipelinePlan(
            stages=[StagePlan(layers=[f"l{s}"], devices=[f"d{r}.{s}"]) for s in range(stages)],
            batch=m,
        )
        for r in range(replicas)
    ]
    if strategy == "ps":
        kw.setdefault("ps_devices", ["d0.0"])
    return Plan(
        model=ModelRef(name="mlp"),
        strategy=strategy,
        global_batch=m * replicas,
        pipelines=pipes,
        micro_batches=m,
        **kw,
    )


def _worst_lag(ops: list[Op], m: int) -> int:
    """Most optimizer steps a forward runs behind a synchronous schedule, where micro-batch
    ``j`` (iteration ``j // m``) would see all ``j // m`` earlier steps."""
    steps, worst = 0, 0
    for kind, j in ops:
        if kind == "O":
            steps += 1
        elif kind == "F":
            worst = max(worst, j // m - steps)
    return worst


# Stage 0 of 3 (two warm-up forwards), 1F1B without flush, a step after every m backwards.
HAND_S3_M1: list[Op] = [
    ("F", 0), ("F", 1), ("F", 2), ("B", 0), ("O", 0),  # F2: iteration 2, no step yet: 2 behind
    ("F", 3), ("B", 1), ("O", 1),  # F3: iteration 3, 1 step: 2 behind
    ("F", 4), ("B", 2), ("O", 2),
]  # fmt: skip
HAND_S3_M2: list[Op] = [
    ("F", 0), ("F", 1), ("F", 2), ("B", 0),  # F2: iteration 1, no step yet: 1 behind
    ("F", 3), ("B", 1), ("O", 0),  # F3: iteration 1, no step yet: 1 behind
    ("F", 4), ("B", 2), ("F", 5), ("B", 3), ("O", 1),  # F4, F5: iteration 2, 1 step: 1 behind
]  # fmt: skip


@pytest.mark.parametrize(("ops", "m", "bound"), [(HAND_S3_M1, 1, 2), (HAND_S3_M2, 2, 1)])
def test_pipedream_bound_matches_a_hand_count(ops: list[Op], m: int, bound: int) -> None:
    assert _worst_lag(ops, m) == bound
    assert insert_optimizer(stage_order("1f1b", 0, 3, len(ops) // 2), m, None)[: len(ops)] == ops
    assert staleness_of(_plan("pipedream", 3, m)) == bound


@pytest.mark.parametrize("stages", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("m", [1, 2, 3, 4, 8])
def test_pipedream_bound_is_stage_zeros_lag_in_the_schedule_order(stages: int, m: int) -> None:
    lags = [
        _worst_lag(insert_optimizer(stage_order("1f1b", s, stages, 6 * m + stages), m, None), m)
        for s in range(stages)
    ]
    assert lags == [math.ceil((stages - 1 - s) / m) for s in range(stages)]
    assert staleness_of(_plan("pipedream", stages, m)) == max(lags)


@pytest.mark.parametrize(("stages", "m"), [(1, 1), (2, 2), (3, 1), (3, 2), (5, 2), (4, 8)])
@pytest.mark.parametrize("d", [0, 1, 2, 3])
def test_wsp_bound_covers_the_simulated_wave_order(stages: int, m: int, d: int) -> None:
    plan = _plan("hybrid", stages, m, replicas=2, sync="wsp", staleness=d)
    lag = math.ceil((stages - 1) / m)
    assert staleness_of(plan) == d + lag
    n = (d + 6) * m + stages
    seen = max(
        _worst_lag(insert_optimizer(stage_order("1f1b", s, stages, n), m, d + 1), m)
        for s in range(stages)
    )
    assert seen == max(d, lag) <= staleness_of(plan)


@pytest.mark.parametrize(
    "plan",
    [
        _plan("dp", 1, 1, replicas=3),
        _plan("ps", 1, 2, replicas=2),
        _plan("gpipe", 4, 2),
        _plan("1f1b", 4, 2),
        _plan("hybrid", 3, 2, replicas=2),
    ],
    ids=["dp", "ps", "gpipe", "1f1b", "hybrid-bsp"],
)
def test_synchronous_plans_have_no_staleness(plan: Plan) -> None:
    assert not is_asynchronous(plan)
    assert staleness_of(plan) == 0
    assert staleness_text(plan) == "sync"


@pytest.mark.parametrize(
    ("plan", "bound", "text"),
    [
        (_plan("pipedream", 3, 2), 1, "async ≤1 it"),
        (_plan("pipedream", 5, 1), 4, "async ≤4 it"),
        (_plan("pipedream", 1, 4), 0, "async ≤0 it"),
        (_plan("hybrid", 3, 2, replicas=2, sync="wsp", staleness=2), 3, "WSP D=2 (+1)"),
        (_plan("hybrid", 1, 2, replicas=2, sync="wsp", staleness=2), 2, "WSP D=2"),
        (_plan("ps", 1, 1, replicas=2, ps_async=True, staleness=3), 3, "async ≤3 it"),
        (_plan("ps", 1, 1, replicas=2, ps_async=True), None, "async, unbounded"),
    ],
    ids=["pipedream", "pipedream-m1", "pipedream-1stage", "wsp", "wsp-1stage", "ssp", "async-ps"],
)
def test_asynchronous_plans_state_their_bound(plan: Plan, bound: int | None, text: str) -> None:
    assert is_asynchronous(plan)
    assert staleness_of(plan) == bound
    assert staleness_text(plan) == text
