"""Predicted against measured peak memory of the ``h100/train`` runs of ``shared/gpu-truth``.

No GPU needed. Each run's plan is predicted as ``train`` predicts it, on one H100; its peak
less the framework allowance (``hetplan.bench.runner.comparable_memory``: the CUDA context
and allocator reserve that ``torch.cuda.max_memory_allocated`` does not see) is set against
the allocator's measured peak. The memory terms of the prediction are listed beside it.

    .venv/bin/python benchmarks/bench_memory_gpu.py [GPU_TRUTH]   (default ../shared/gpu-truth)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hetplan.bench.runner import comparable_memory
from hetplan.cluster.config import config_from_data
from hetplan.cluster.resolve import resolve_config
from hetplan.cluster.spec import Cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.planspec import Plan
from hetplan.predict import predict
from hetplan.serde import from_data

DEFAULT_TRUTH = Path(__file__).resolve().parents[2] / "shared" / "gpu-truth"
GB = 1e9  # decimal gigabytes, as the measurements are read
SHOWN_TERMS = 0.01  # terms below this fraction of the predicted peak are left out


def one_h100() -> Cluster:
    """The cluster the ``h100/train`` runs were made on: one H100, device ``g.0``."""
    data = {"name": "h100-1", "nodes": [{"name": "g", "devices": [{"type": "H100-SXM"}]}]}
    return resolve_config(config_from_data(data, "h100-1"), "h100-1")


def row(run: Path) -> tuple[str, float]:
    """The table row of one run, and its relative error."""
    data = json.loads(run.read_text())
    plan = from_data(Plan, data["plan"], str(run))
    graph = build_graph(plan.model)
    pred = predict(plan, graph, one_h100(), AnalyticalCompute(graph.dtype))
    device = pred.devices[0]
    predicted = comparable_memory(pred)[device.id]
    measured = float(data["ranks"][0]["peak_memory_bytes"])
    err = predicted / measured - 1
    terms = sorted(
        ((k, v) for k, v in device.memory.items() if k != "framework"),
        key=lambda kv: -kv[1],
    )
    shown = ", ".join(f"{k} {v / GB:.2f}" for k, v in terms if v >= SHOWN_TERMS * predicted)
    text = (
        f"| {run.stem} | {measured / GB:.2f} GB | {predicted / GB:.2f} GB | {err:+.1%} | {shown} |"
    )
    return text, err


def main(truth: Path) -> None:
    runs = sorted((truth / "h100" / "train").glob("*.json"))
    if not runs:
        raise SystemExit(f"{truth}: no h100/train/*.json")
    print("| run | measured (allocator peak) | predicted (no framework) | error | terms, GB |")
    print("|---|---|---|---|---|")
    errors = []
    for run in runs:
        text, err = row(run)
        print(text)
        errors.append(abs(err))
    print(f"\nmedian |error| {sorted(errors)[len(errors) // 2]:.1%}, max {max(errors):.1%}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_TRUTH)
