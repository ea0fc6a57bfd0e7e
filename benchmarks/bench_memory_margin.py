"""The feasibility margin, from measured against predicted peak memory.

No GPU needed. GPU: the ``h100/train`` runs of ``shared/gpu-truth`` predicted as ``train``
predicts them (``bench_memory_gpu.py``), less the framework allowance, against
``torch.cuda.max_memory_allocated``. CPU (and any GPU case): a ``hetplan bench`` result
(``results.json``), each case's largest ``measured / predicted`` rank. The margin of a kind is
the ``--quantile`` of its ratios (at least 1) over ``1 - fragmentation`` on a GPU
(``hetplan.bench.margin``); the constants in ``hetplan.cost.memory_margin`` are printed beside
it.

    .venv/bin/python benchmarks/bench_memory_margin.py RESULTS_JSON [--truth GPU_TRUTH]
        [--quantile Q] [--store STORE]    (defaults: ../shared/gpu-truth, 1.0; with the
        run's profile store the CPU cases are predicted again by the current model)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench_memory_gpu import DEFAULT_TRUTH, one_h100
from bench_repredict import repredicted_memory

from hetplan.bench.margin import CPU, GPU, MARGIN_QUANTILE, case_peak_ratios, margin_of, peak_ratio
from hetplan.bench.runner import comparable_memory
from hetplan.cost import memory_margin as mm
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.planspec import Plan
from hetplan.predict import predict
from hetplan.serde import from_data

GB = 1e9  # decimal gigabytes, as the measurements are read
QUANTILES = (0.5, 0.9, 0.95, 1.0)  # shown beside the chosen one


def truth_ratios(truth: Path) -> list[tuple[str, float, float]]:
    """(run, measured, predicted) peak bytes of each ``h100/train`` run."""
    out = []
    for run in sorted((truth / "h100" / "train").glob("*.json")):
        data = json.loads(run.read_text())
        plan = from_data(Plan, data["plan"], str(run))
        graph = build_graph(plan.model)
        pred = predict(plan, graph, one_h100(), AnalyticalCompute(graph.dtype))
        predicted = comparable_memory(pred)[pred.devices[0].id]
        measured = max(float(r["peak_memory_bytes"]) for r in data["ranks"])
        out.append((run.stem, measured, predicted))
    return out


def report(kind: str, ratios: list[float], quantile: float, fragmentation: float) -> float:
    """Print a kind's ratios and margin; return the margin."""
    cuts = ", ".join(f"q{q:g} {peak_ratio(ratios, q):.3f}" for q in QUANTILES)
    ratio = peak_ratio(ratios, quantile)
    margin = margin_of(ratio, fragmentation)
    print(f"{kind}: {len(ratios)} runs; measured/predicted {cuts} (each at least 1)")
    print(
        f"{kind}: peak ratio (q{quantile:g}) {ratio:.3f} / (1 - fragmentation {fragmentation:g})"
        f" = margin {margin:.3f}: the model's terms may use {1 / margin:.1%} of what the"
        " framework allowance leaves"
    )
    return margin


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="a hetplan bench results.json")
    ap.add_argument("--truth", type=Path, default=DEFAULT_TRUTH)
    ap.add_argument("--quantile", type=float, default=MARGIN_QUANTILE)
    ap.add_argument(
        "--store", type=Path, default=None,
        help="the run's profile store: predict its cases again with the current model",
    )  # fmt: skip
    args = ap.parse_args()
    data = (
        json.loads(args.results.read_text())
        if args.store is None
        else repredicted_memory(args.results, args.store)
    )
    ratios = case_peak_ratios(data)
    print("| h100/train run | measured | predicted (no framework) | measured/predicted |")
    print("|---|---|---|---|")
    for name, measured, predicted in truth_ratios(args.truth):
        print(f"| {name} | {measured / GB:.2f} GB | {predicted / GB:.2f} GB | "
              f"{measured / predicted:.3f} |")  # fmt: skip
        ratios.setdefault(GPU, []).append(measured / predicted)
    print()
    gpu = report(GPU, ratios[GPU], args.quantile, mm.ALLOCATOR_FRAGMENTATION)
    cpu = report(CPU, ratios.get(CPU, []), args.quantile, 0.0)
    print(
        f"\nin code (hetplan.cost.memory_margin): GPU_MEMORY_MARGIN {mm.GPU_MEMORY_MARGIN:.3f}"
        f" (measured {gpu:.3f}), CPU_MEMORY_MARGIN {mm.CPU_MEMORY_MARGIN:.3f} (measured"
        f" {cpu:.3f})"
    )


if __name__ == "__main__":
    main()
