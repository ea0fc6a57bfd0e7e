"""The strategy specs: in-flight counts by hand, the one runnability rule, the shapes."""

from __future__ import annotations

import dataclasses

import pytest

from hetplan.planspec.order import in_flight, stage_order
from hetplan.planspec.plan import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.planspec.strategies import SPECS, STRATEGIES, spec_of


def test_every_strategy_has_one_spec() -> None:
    assert tuple(SPECS) == STRATEGIES
    assert all(spec_of(name).name == name for name in STRATEGIES)
    with pytest.raises(ValueError, match="strategy"):
        spec_of("zero")


def test_in_flight_counts_by_hand() -> None:
    """GPipe holds every micro-batch; 1F1B the warm-up depth min(S - s, m) (Narayanan et al.
    2021); PipeDream S - s whatever m (a continuous stream); one-stage replicas 1."""
    assert [spec_of("gpipe").in_flight(s, 4, 8) for s in range(4)] == [8, 8, 8, 8]
    assert [spec_of("1f1b").in_flight(s, 4, 8) for s in range(4)] == [4, 3, 2, 1]
    assert [spec_of("1f1b").in_flight(s, 4, 2) for s in range(4)] == [2, 2, 2, 1]
    assert [spec_of("hybrid").in_flight(s, 4, 2) for s in range(4)] == [2, 2, 2, 1]
    assert [spec_of("pipedream").in_flight(s, 4, 2) for s in range(4)] == [4, 3, 2, 1]
    assert spec_of("dp").in_flight(0, 1, 1) == 1
    assert spec_of("ps").in_flight(0, 1, 4) == 1
    assert [spec_of("pipedream").stashed_versions(s, 4) for s in range(4)] == [3, 2, 1, 0]
    # weights change once per iteration: 3 micro-batches in flight beyond the newest span at
    # most ceil(3 / m) older versions (hand count: m = 2 -> 2, m = 8 -> 1)
    assert [spec_of("pipedream").stashed_versions(s, 4, 2) for s in range(4)] == [2, 1, 1, 0]
    assert [spec_of("pipedream").stashed_versions(s, 4, 8) for s in range(4)] == [1, 1, 1, 0]
    assert spec_of("1f1b").stashed_versions(0, 4) == 0
    with pytest.raises(ValueError, match="stage 4 out of range"):
        in_flight("1f1b", 4, 4, 2)


def test_in_flight_is_the_peak_of_the_order() -> None:
    """Brute force: replay each order and count forwards not yet backwarded."""
    for order in ("gpipe", "1f1b"):
        for stages in range(1, 6):
            for m in range(1, 9):
                for s in range(stages):
                    ops = stage_order(order, s, stages, m)
                    live = [
                        sum(1 if k == "F" else -1 for k, _ in ops[: i + 1]) for i in range(len(ops))
                    ]
                    assert in_flight(order, s, stages, m) == max(live)


def _plan(strategy: str, batch: int = 8, m: int = 4, **kw: object) -> Plan:
    stages = [StagePlan(layers=["a"], devices=["x"]), StagePlan(layers=["b"], devices=["y"])]
    one = strategy in ("dp", "ps")
    pipe = PipelinePlan(stages=stages[:1] if one else stages, batch=batch)
    extra = {"ps_devices": ["x"]} if strategy == "ps" else {}
    return Plan(
        model=ModelRef(name="m"), strategy=strategy, global_batch=batch,  # type: ignore[arg-type]
        micro_batches=m, pipelines=[pipe], **extra, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_one_rule_for_what_cannot_run() -> None:
    """Replicas accumulate uneven slices (torch.tensor_split); pipelines exchange fixed shapes;
    no TP in a window; fp16 needs a common step."""
    assert spec_of("dp").why_unrunnable(_plan("dp", 7, 3)) is None
    assert spec_of("ps").why_unrunnable(_plan("ps", 7, 3)) is None
    why = spec_of("gpipe").why_unrunnable(_plan("gpipe", 6, 4))
    assert why is not None and why.startswith("pipelines.0.batch (6) must be a multiple of")
    assert spec_of("pipedream").why_unrunnable(_plan("pipedream")) is None
    fp16 = dataclasses.replace(_plan("pipedream"), model=ModelRef(name="m", dtype="fp16"))
    assert "fp16" in str(spec_of("pipedream").why_unrunnable(fp16))
    assert spec_of("ps").why_unrunnable(dataclasses.replace(_plan("ps"), ps_async=True)) is None


def test_variants_follow_the_plan_fields() -> None:
    wsp = _plan("1f1b")
    assert spec_of("1f1b").executor(wsp) == "flushed"
    assert spec_of("pipedream").executor(wsp) == "window"
    ps = _plan("ps")
    assert spec_of(ps).executor(ps) == "ps"
    ps_async = dataclasses.replace(ps, ps_async=True)
    assert spec_of(ps).executor(ps_async) == "ps-async"
    assert spec_of(ps).asynchronous(ps_async) and not spec_of(ps).asynchronous(ps)
    assert not spec_of(ps).syncs_replicas(ps)
