"""Per-device memory of parameter-server and PipeDream plans, counted by hand on synthetic
layers (issue 26, item 4): what each PS rank holds, a server-only rank's flat buffers, the
input batches PipeDream's first stage keeps across an iteration's end."""

from __future__ import annotations

import dataclasses

import pytest
from predict_synthetic import FixedCompute, cluster, graph

from hetplan.graph.types import ModelGraph
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.predict import predict

REF = ModelRef(name="syn")
P = 4 * 4000  # 4 layers of 1000 fp32 parameters: 16000 B of weights


def _ps(ps_async: bool = False) -> Plan:
    workers = [PipelinePlan(stages=[StagePlan(layers=[f"l{i}" for i in range(4)],
                                              devices=[f"n0.{k}"])], batch=4)
               for k in range(2)]  # fmt: skip
    return Plan(
        model=REF, strategy="ps", global_batch=8, pipelines=workers, optimizer="adam",
        ps_devices=["n0.1", "n0.2"], ps_assignment="round_robin", ps_async=ps_async,
    )  # fmt: skip


def _held(plan: Plan, g: ModelGraph) -> dict[str, float]:
    pred = predict(plan, g, cluster(3), FixedCompute())
    return {d.id: d.memory_bytes - d.memory["framework"] for d in pred.devices}


def test_sync_ps_ranks_by_hand() -> None:
    g = graph(4, params=1000, cut=0, saved=100)
    held = _held(_ps(), g)
    # Round robin: n0.1 serves tensors 0 and 2, n0.2 tensors 1 and 3 (8000 B each).
    # A worker: weights P, gradients P, no optimizer state (the hosts keep it), activations
    # 4 x 100 B x 4 samples = 1600, freed before the push, whose flat buffers hold every
    # gradient (P): max(1600, P) on top of weights and gradients.
    worker = P + P + P
    assert held["n0.0"] == worker
    # n0.1 also hosts: Adam's two fp32 slots of its 8000 B (its tensors are the worker's).
    assert held["n0.1"] == worker + 2 * 8000
    # n0.2 runs no stage: its shard's weights, gradients and slots, and the flat buffers of
    # every shard it joins the push and pull of (zeros for the other host's).
    assert held["n0.2"] == 8000 * (1 + 1 + 2) + P


def test_async_ps_hosts_keep_master_copies() -> None:
    g = graph(4, params=1000, cut=0, saved=100)
    held = _held(_ps(ps_async=True), g)
    worker = 3 * P
    assert held["n0.0"] == worker
    # masters, their gradient, slots, and the server's three flat copies of its shard (the
    # receiver's posted buffer, a push, the reply: run/execute/ps_async.py)
    assert held["n0.1"] == worker + 8000 * (1 + 1 + 2 + 3)
    assert held["n0.2"] == 8000 * (1 + 1 + 1 + 2 + 3) + P  # and the shard its module holds


@pytest.mark.parametrize("input_bytes", [4, 400])
def test_pipedream_first_stage_holds_two_iterations_batches(input_bytes: int) -> None:
    g = dataclasses.replace(graph(4, params=1000, cut=0, saved=100), input_bytes=input_bytes)
    stages = [
        PipelinePlan(
            stages=[StagePlan(layers=["l0", "l1"], devices=["n0.0"]),
                    StagePlan(layers=["l2", "l3"], devices=["n0.1"])],
            batch=16,
        )
    ]  # fmt: skip
    plan = Plan(model=REF, strategy="pipedream", global_batch=16, micro_batches=4,
                pipelines=stages, optimizer="sgd")  # fmt: skip
    pred = predict(plan, g, cluster(2), FixedCompute())
    first, last = pred.devices
    # Stage 0: 2 micro-batches of 4 in flight; the next iteration's batch is read before the
    # last backward of this one: 2 x 16 samples, less the 2 x 4 the first layer keeps (it
    # saves min(input, its 100 saved B) per sample).
    kept = min(input_bytes, 100) * 4 * 2
    assert first.memory["input_batch"] == input_bytes * 32 - kept
    assert first.memory["stashed_weights"] == 8000  # one version beyond the current one
    # The last stage reads the batch too (for its targets): one iteration's, whole.
    assert last.memory["input_batch"] == input_bytes * 16
    assert last.memory["stashed_weights"] == 0
