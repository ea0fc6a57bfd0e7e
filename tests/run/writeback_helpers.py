"""Shared by the write-back tests: a two-stage resnet-tiny plan, a synthetic measurement of it,
and a store holding a profile of it filed under a chosen source."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.profile.importer import import_file
from hetplan.profile.store import save_profile
from hetplan.run.measurement.measure import Measurement, RankFigures

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
LOCAL = CLUSTERS / "local-cpu.yaml"
SHARED = CLUSTERS / "local-cpu-hetero.yaml"  # local.1 and local.2 share core 1 (speed 1/2)
LAYERS = ["stem", "layer1_0", "layer2_0", "pool", "head"]
REF = ModelRef(name="resnet-tiny")


def gpipe(devices: list[str], micro_batches: int = 2, **extra: Any) -> Plan:
    stages = [StagePlan(layers=LAYERS[:2], devices=[devices[0]]),
              StagePlan(layers=LAYERS[2:], devices=[devices[1]])]  # fmt: skip
    return Plan(
        model=REF, strategy="gpipe", global_batch=4, micro_batches=micro_batches,
        pipelines=[PipelinePlan(batch=4, stages=stages)], **extra,
    )  # fmt: skip


def measured(
    plan: Plan,
    per_rank: list[tuple[float, float]],
    steps: int = 10,
    iterations: list[float] | None = None,
) -> Measurement:
    """A run of ``plan`` whose rank r measured (forward, backward) seconds per step; its
    iteration times are ``iterations`` (default: all 1 s, no spread)."""
    ranks = [
        RankFigures(
            rank=r, device=d, pipeline=0, stage=r, step_s=f + b, forward_s=f, backward_s=b,
            optimizer_s=0.0, wait_s=0.0, peak_memory_bytes=0, memory_source="tensor bytes",
        )
        for r, (d, (f, b)) in enumerate(zip(plan.devices, per_rank, strict=True))
    ]  # fmt: skip
    its = iterations if iterations is not None else [1.0] * steps
    return Measurement(
        plan=plan, cluster="test", steps=steps, warmup=1, measured_iteration_s=1.0,
        iteration_p10_s=1.0, iteration_p90_s=1.0, iteration_s=its,
        loss=[0.0] * (steps + 1), ranks=ranks,
    )  # fmt: skip


def store_with_import(
    tmp_path: Path, sizes: tuple[int, ...] = (1, 4), source: str = "imported"
) -> Path:
    """A store holding one profile of resnet-tiny on cpu at ``sizes``, filed as ``source``."""
    rows = [
        {"layer": n, "device_type": "cpu", "dtype": "fp32", "micro_batch": b,
         "fwd_s": (i + 1) * b * 1e-4, "bwd_s": (i + 1) * (1 + b) * 1e-4}
        for b in sizes for i, n in enumerate(LAYERS)
    ]  # fmt: skip
    file = tmp_path / "rows.json"
    file.write_text(json.dumps(rows))
    store = tmp_path / "store"
    [profile] = import_file(file, "resnet-tiny")
    save_profile(dataclasses.replace(profile, source=source), store)
    return store
