"""A mixed GPU + CPU pipeline on real CUDA (marked ``gpu``; skipped without it): the GPU stage
and the CPU stage train the network of the one-process reference (gloo, the GPU rank's values
staged through host memory), and each rank's trace says how it was timed."""

from __future__ import annotations

import pytest
import torch

from hetplan.cluster.config import cluster_from_data
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.run.references.reference import reference_run
from hetplan.run.setup.model import layer_names, source_for
from hetplan.run.train import run_plan

pytestmark = pytest.mark.gpu


def test_gpu_then_cpu_pipeline_equals_the_reference() -> None:
    cluster = cluster_from_data(
        {"name": "mixed", "nodes": [{"name": "n", "devices": [
            {"type": "H100-SXM", "count": 1}, {"type": "cpu", "count": 1}],
            "link": {"type": "PCIe5x16"}}]},
        "<mixed>",
    )  # fmt: skip
    ref = ModelRef(name="gpt-tiny")
    layers = layer_names(source_for(ref))
    half = len(layers) // 2
    plan = Plan(
        model=ref, strategy="gpipe", global_batch=8, micro_batches=4,
        pipelines=[PipelinePlan(stages=[StagePlan(layers=layers[:half], devices=["n.0"]),
                                        StagePlan(layers=layers[half:], devices=["n.1"])],
                                batch=8)],
    )  # fmt: skip
    raw = run_plan(plan, cluster=cluster, steps=3, seed=5)
    got = [sum(r.loss[i] for r in raw if r.loss[i] is not None) for i in range(3)]
    want, _ = reference_run(plan, source_for(ref), seed=5, steps=3)
    # fp32 on two devices: the GPU's kernels round differently from the CPU reference's
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-5)
    assert [r.timing for r in raw] == ["cuda events", "host clock"]
