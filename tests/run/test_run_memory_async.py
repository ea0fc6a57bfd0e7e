"""Predicted peak memory against the measured CPU peak (issue 26, item 4): PipeDream's
stages, a synchronous parameter server with a server-only rank, tensor-parallel ranks (real
processes, gloo, CPU; the prediction less the framework allowance, as ``hetplan bench``
compares them). Before: the PipeDream stages -16% and -26% (Adam's state, made after the
first step's backward, was not counted), the server-only rank +56% (its flat buffers), the
workers -18% and -27% (charged an optimizer state the hosts keep), the TP ranks -61%
(DTensor's local operators not counted); resnet-tiny's PipeDream last stage +48% (every
send kept until the window's end; the next micro-batch's input received ahead not charged)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from hetplan.bench.runner import comparable_memory
from hetplan.cluster.config import load_cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.predict import predict
from hetplan.run.setup.model import ZooSource, layer_names
from hetplan.run.train import run_plan

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
WITHIN = 0.15  # issue 26's bound for PipeDream's and a server rank's CPU peak


def _figures(plan: Plan, cluster_file: str) -> dict[str, tuple[int, float]]:
    """Device -> (measured peak of the first step, predicted less the framework allowance)."""
    cluster = load_cluster(CLUSTERS / cluster_file)
    graph = build_graph(plan.model)
    predicted = comparable_memory(predict(plan, graph, cluster, AnalyticalCompute(graph.dtype)))
    ranks = run_plan(plan, cluster=cluster, steps=2, seed=1)
    assert all(r.memory_source == "tensor bytes" for r in ranks)
    return {r.device: (r.peak_memory_bytes, predicted[r.device]) for r in ranks}


def _errors(plan: Plan, cluster_file: str) -> dict[str, float]:
    """Device -> (measured - predicted) / predicted of the first step's peak."""
    return {d: (m - p) / p for d, (m, p) in _figures(plan, cluster_file).items()}


def _stages(name: str, devices: list[list[str]]) -> list[StagePlan]:
    layers = layer_names(ZooSource(name=name))
    n = len(devices)
    bounds = [round(k * len(layers) / n) for k in range(n + 1)]
    return [
        StagePlan(layers=layers[bounds[k] : bounds[k + 1]], devices=devices[k]) for k in range(n)
    ]


def _pipedream(name: str, dataset: str | None, batch: int, micro: int) -> Plan:
    stages = _stages(name, [["local.0"], ["local.1"]])
    return Plan(
        model=ModelRef(name=name, dataset=dataset), strategy="pipedream", global_batch=batch,
        micro_batches=micro, pipelines=[PipelinePlan(stages=stages, batch=batch)],
        optimizer="adam",
    )  # fmt: skip


def _pipedream_gpt() -> Plan:
    return _pipedream("gpt-tiny", None, 8, 2)


def _pipedream_resnet() -> Plan:
    return _pipedream("resnet-tiny", "cifar10", 32, 4)


def _ps() -> Plan:
    workers = [
        PipelinePlan(stages=_stages("gpt-tiny", [[f"local.{k}"]]), batch=16) for k in range(2)
    ]
    return Plan(
        model=ModelRef(name="gpt-tiny"), strategy="ps", global_batch=32, pipelines=workers,
        optimizer="adam", ps_devices=["local.1", "local.2"], ps_assignment="size",
    )  # fmt: skip


def _ps_async() -> Plan:
    """gpt-tiny's asynchronous PS, both workers hosting a shard (sizes balanced), Adam."""
    workers = [
        PipelinePlan(stages=_stages("gpt-tiny", [[f"local.{k}"]]), batch=16) for k in range(2)
    ]
    return Plan(
        model=ModelRef(name="gpt-tiny"), strategy="ps", global_batch=32, pipelines=workers,
        optimizer="adam", ps_devices=["local.0", "local.1"], ps_assignment="size",
        ps_async=True, staleness=1,
    )  # fmt: skip


def _tp() -> Plan:
    stages = _stages("gpt-tiny", [["local.0", "local.1"]])
    return Plan(
        model=ModelRef(name="gpt-tiny"), strategy="gpipe", global_batch=8, micro_batches=2,
        pipelines=[PipelinePlan(stages=stages, batch=8)], optimizer="adam", tp=2,
    )  # fmt: skip


def _wsp() -> Plan:
    """gpt-tiny WSP, 2 pipelines x 2 stages, staleness 1 (the quick suite's plan)."""
    pipes = [
        PipelinePlan(
            stages=_stages("gpt-tiny", [[f"local.{2 * p}"], [f"local.{2 * p + 1}"]]), batch=16
        )
        for p in range(2)
    ]
    return Plan(
        model=ModelRef(name="gpt-tiny"), strategy="hybrid", sync="wsp", staleness=1,
        global_batch=32, micro_batches=4, pipelines=pipes,
    )  # fmt: skip


CASES: dict[str, tuple[Callable[[], Plan], str]] = {
    "pipedream gpt-tiny, 2 stages, batch 8, m=2, Adam": (_pipedream_gpt, "local-cpu.yaml"),
    "ps gpt-tiny, 2 workers x 16, hosts local.1 and local.2 (server-only), Adam": (
        _ps, "local-cpu-hetero.yaml",
    ),
    "ps async s=1 gpt-tiny, 2 workers x 16, both hosts, Adam": (_ps_async, "local-cpu.yaml"),
    "gpipe tp=2 gpt-tiny, batch 8, m=2, Adam": (_tp, "local-cpu.yaml"),
    "pipedream resnet-tiny/cifar10, 2 stages, batch 32, m=4, Adam": (
        _pipedream_resnet, "local-cpu.yaml",
    ),
    "wsp gpt-tiny, 2x2, D=1, m=4, SGD": (_wsp, "local-cpu-4on2.yaml"),
}  # fmt: skip
"""The real runs of the tests below, by label: a plan and its cluster file."""


@pytest.mark.slow
def test_pipedream_stages_within_15_percent() -> None:
    errors = _errors(_pipedream_gpt(), "local-cpu.yaml")
    assert set(errors) == {"local.0", "local.1"}
    assert all(abs(e) <= WITHIN for e in errors.values()), errors


@pytest.mark.slow
def test_ps_server_only_rank_and_workers_within_15_percent() -> None:
    errors = _errors(_ps(), "local-cpu-hetero.yaml")
    assert set(errors) == {"local.0", "local.1", "local.2"}  # local.2 runs no stage
    assert all(abs(e) <= WITHIN for e in errors.values()), errors


@pytest.mark.slow
def test_async_ps_hosts_within_15_percent() -> None:
    """Each rank is a worker and, in threads of its process, a server. Before the counter
    followed those threads (run/setup/side_threads.py) it saw none of the server's tensors
    that the step made, and the servers' buffers were not priced: the quick suite's vgg11
    host measured -39.9%. The servers' pushes and replies overlap the worker's peak or not,
    as the threads happen to run: on this plan the hosts measured -11.0% (their receive
    buffer alone beside the worker's peak) or -5.5% (a push applied meanwhile); the model
    charges the bound."""
    errors = _errors(_ps_async(), "local-cpu.yaml")
    assert set(errors) == {"local.0", "local.1"}
    assert all(abs(e) <= WITHIN for e in errors.values()), errors


@pytest.mark.slow
def test_tensor_parallel_ranks_within_15_percent() -> None:
    errors = _errors(_tp(), "local-cpu.yaml")
    assert all(abs(e) <= WITHIN for e in errors.values()), errors


@pytest.mark.slow
def test_pipedream_with_large_cuts_within_15_percent() -> None:
    """resnet-tiny's cuts are large beside its stages: the last stage measured +48% while
    the runtime kept its sends until the window's end (gloo's ``is_completed()`` is False
    until ``wait()``), +16% with its input gradients' sends waited before its next compute
    (the next micro-batch's input, received ahead, was not charged), -1% with it charged."""
    errors = _errors(_pipedream_resnet(), "local-cpu.yaml")
    assert all(abs(e) <= WITHIN for e in errors.values()), errors


@pytest.mark.slow
def test_wsp_ranks_within_15_percent() -> None:
    """WSP holds an iteration's gradients and its wave's buckets while the next iteration's
    backwards add into their own set, and stashes weights on its first stage (walked from the
    schedule, hetplan.schedule.window_state); charged one set of each, the quick suite's
    gpt-tiny 2x2 measured +28% and vgg11's +50%."""
    errors = _errors(_wsp(), "local-cpu-4on2.yaml")
    assert len(errors) == 4
    assert all(abs(e) <= WITHIN for e in errors.values()), errors


def main() -> None:
    """Print every case's ranks as a Markdown table (docs/benchmarks.md, issue 26 item 4)."""
    print("| plan | rank | measured MB | predicted MB | error |\n|---|---|---|---|---|")
    for label, (make, cluster_file) in CASES.items():
        for dev, (measured, predicted) in _figures(make(), cluster_file).items():
            error = (measured - predicted) / predicted
            print(
                f"| {label} | {dev} | {measured / 1e6:.2f} | {predicted / 1e6:.2f} | {error:+.1%} |"
            )


if __name__ == "__main__":
    main()
