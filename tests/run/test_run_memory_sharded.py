"""Predicted peak memory against the measured CPU peak (issue 26's and 29's bound, 15%) for
the sharded families added beside FSDP2: ZeRO-1 (each rank's owned optimizer state) and
pipelines of FSDP2-sharded stages (real processes, gloo, CPU; the prediction less the
framework allowance, as ``hetplan bench`` compares them)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from test_run_memory_async import WITHIN, _errors, _stages

from hetplan.planspec import ModelRef, PipelinePlan, Plan


def _zero1(name: str, dataset: str | None) -> Plan:
    pipes = [PipelinePlan(stages=_stages(name, [[f"local.{k}"]]), batch=8) for k in range(3)]
    return Plan(
        model=ModelRef(name=name, dataset=dataset), strategy="fsdp", zero=1, global_batch=24,
        pipelines=pipes, optimizer="adam",
    )  # fmt: skip


def _shard_stages(name: str, dataset: str | None) -> Plan:
    pipes = [
        PipelinePlan(stages=_stages(name, [[f"local.{2 * p}"], [f"local.{2 * p + 1}"]]), batch=8)
        for p in range(2)
    ]
    return Plan(
        model=ModelRef(name=name, dataset=dataset), strategy="hybrid", shard_stages=True,
        global_batch=16, micro_batches=2, pipelines=pipes, optimizer="adam",
    )  # fmt: skip


CASES: dict[str, Callable[[], Plan]] = {
    "zero1-resnet-tiny": lambda: _zero1("resnet-tiny", "cifar10"),
    "zero1-gpt-tiny": lambda: _zero1("gpt-tiny", None),
    "shard-stages-resnet-tiny": lambda: _shard_stages("resnet-tiny", "cifar10"),
    "shard-stages-gpt-tiny": lambda: _shard_stages("gpt-tiny", None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_sharded_ranks_within_15_percent(case: str) -> None:
    plan = CASES[case]()
    errors = _errors(plan, "local-cpu-4on2.yaml")
    assert all(abs(e) <= WITHIN for e in errors.values()), errors


if __name__ == "__main__":  # the figures for docs/benchmarks.md
    for name in sorted(CASES):
        errs = _errors(CASES[name](), "local-cpu-4on2.yaml")
        print(name, {d: f"{e:+.1%}" for d, e in sorted(errs.items())})
