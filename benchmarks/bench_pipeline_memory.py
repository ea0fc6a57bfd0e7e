"""Peak memory of the pipelined families on CPU ranks: each rank's measured first-step peak
(live tensor bytes, ``run/meters/memcount.py``) against ``predict`` less the framework
allowance (``bench.runner.comparable_memory``), as ``hetplan bench`` compares them (issue 26,
item 4).

    .venv/bin/python benchmarks/bench_pipeline_memory.py [--models resnet-tiny,vgg11]
        [--strategies gpipe,1f1b,pipedream,wsp] [--json out.json]

Plans: the model (cifar10) cut into 2 stages of equal layer counts, batch 32 per pipeline,
4 micro-batches, Adam; gpipe, 1f1b and pipedream on ``examples/clusters/local-cpu.yaml``
(2 ranks), WSP (hybrid, ``sync: wsp``) as 2 pipelines of 2 stages on
``local-cpu-4on2.yaml``. Real processes, gloo; memory figures do not vary between runs.
Prints a markdown table (error = (measured - predicted) / predicted).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hetplan.bench.runner import comparable_memory
from hetplan.cluster.config import load_cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.planspec.strategies import Strategy
from hetplan.predict import predict
from hetplan.run.setup.model import ZooSource, layer_names
from hetplan.run.train import run_plan

CLUSTERS = Path(__file__).resolve().parents[1] / "examples" / "clusters"
DATASET = "cifar10"
PIPELINES: dict[str, Strategy] = {"gpipe": "gpipe", "1f1b": "1f1b", "pipedream": "pipedream"}


def _stages(model: str, devices: list[list[str]]) -> list[StagePlan]:
    layers = layer_names(ZooSource(name=model, dataset=DATASET))
    n = len(devices)
    bounds = [round(k * len(layers) / n) for k in range(n + 1)]
    return [
        StagePlan(layers=layers[bounds[k] : bounds[k + 1]], devices=devices[k]) for k in range(n)
    ]


def plan_of(model: str, strategy: str, batch: int = 32, micro: int = 4) -> tuple[Plan, str]:
    """The plan of ``strategy`` (gpipe, 1f1b, pipedream or wsp) and its cluster file."""
    ref = ModelRef(name=model, dataset=DATASET)
    if strategy == "wsp":
        pipes = [
            PipelinePlan(
                stages=_stages(model, [[f"local.{2 * p}"], [f"local.{2 * p + 1}"]]), batch=batch
            )
            for p in range(2)
        ]
        plan = Plan(model=ref, strategy="hybrid", sync="wsp", global_batch=2 * batch,
                    micro_batches=micro, pipelines=pipes, optimizer="adam")  # fmt: skip
        return plan, "local-cpu-4on2.yaml"
    pipe = PipelinePlan(stages=_stages(model, [["local.0"], ["local.1"]]), batch=batch)
    plan = Plan(model=ref, strategy=PIPELINES[strategy], global_batch=batch, micro_batches=micro,
                pipelines=[pipe], optimizer="adam")  # fmt: skip
    return plan, "local-cpu.yaml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet-tiny,vgg11")
    ap.add_argument("--strategies", default="gpipe,1f1b,pipedream,wsp")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = []
    print("| plan | rank | measured MB | predicted MB | error |\n|---|---|---|---|---|")
    for model in args.models.split(","):
        for strategy in args.strategies.split(","):
            plan, cluster_file = plan_of(model, strategy)
            cluster = load_cluster(CLUSTERS / cluster_file)
            graph = build_graph(plan.model)
            prediction = predict(plan, graph, cluster, AnalyticalCompute(graph.dtype))
            predicted = comparable_memory(prediction)
            for r in run_plan(plan, cluster=cluster, steps=2, seed=1):
                p = predicted[r.device]
                error = (r.peak_memory_bytes - p) / p
                print(
                    f"| {model} {strategy} | {r.device} | {r.peak_memory_bytes / 1e6:.2f} | "
                    f"{p / 1e6:.2f} | {error:+.1%} |",
                    flush=True,
                )
                parts = next(d.memory for d in prediction.devices if d.id == r.device)
                rows.append({
                    "model": model, "strategy": strategy, "device": r.device,
                    "measured_bytes": r.peak_memory_bytes, "predicted_bytes": p,
                    "predicted_parts": {k: v for k, v in parts.items() if v},
                })  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
