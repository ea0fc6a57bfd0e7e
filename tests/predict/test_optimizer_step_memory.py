"""The optimizer step's temporaries (cost.optimizer_step) against hand counts of torch's Adam:
one state slot per parameter on the foreach path (CUDA ranks), two copies of the largest
tensor's state on the single-tensor path (CPU ranks); none for SGD."""

from __future__ import annotations

import dataclasses

from predict_synthetic import FixedCompute, cluster, graph

from hetplan.cluster.spec import Cluster
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.predict import predict

PARAMS = 1_000_000  # per layer: one 4 MB tensor each; 4 layers; activations 100 B a sample
# One rank training alone (no gradient buckets: with them, data parallelism holds a bucket of
# every gradient at the end of its backward, as large as the foreach temporaries).


def _memory(c: Cluster, optimizer: str) -> dict[str, float]:
    g = graph(4, params=PARAMS)
    plan = Plan(
        model=ModelRef(name="syn"), strategy="dp", global_batch=1, optimizer=optimizer,
        pipelines=[
            PipelinePlan(stages=[StagePlan(layers=[f"l{i}" for i in range(4)], devices=[d])],
                         batch=1)
            for d in ("n0.0",)
        ],
    )  # fmt: skip
    return next(d.memory for d in predict(plan, g, c, FixedCompute()).devices if d.id == "n0.0")


def _cpu(c: Cluster) -> Cluster:
    cpu = dataclasses.replace(c.devices[0].type, name="cpu")
    return dataclasses.replace(
        c, devices=tuple(dataclasses.replace(d, type=cpu) for d in c.devices)
    )


def test_adam_on_cuda_ranks_holds_one_state_slot_of_temporaries_at_its_step() -> None:
    mem = _memory(cluster(2), "adam")
    params = 4 * PARAMS
    assert mem["optimizer"] == 2 * 4 * params  # exp_avg and exp_avg_sq, fp32
    assert mem["optimizer_step"] == 4 * params  # _foreach_sqrt(exp_avg_sqs): one fp32 each
    # the step is the peak: nothing else of the backward (activations, buckets) is held
    assert mem["activations"] == mem["backward_workspace"] == mem["comm_buffers"] == 0.0
    assert mem["grads"] == 4 * params


def test_adam_on_cpu_ranks_holds_two_copies_of_the_largest_tensor() -> None:
    mem = _memory(_cpu(cluster(2)), "adam")
    assert mem["optimizer_step"] == 2 * 4 * PARAMS  # sqrt and quotient of one 1M tensor


def test_sgd_steps_in_place() -> None:
    for c in (cluster(2), _cpu(cluster(2))):
        for optimizer in ("sgd", "momentum"):
            assert _memory(c, optimizer)["optimizer_step"] == 0.0
