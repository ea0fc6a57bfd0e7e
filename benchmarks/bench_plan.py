"""Planning time against model depth and cluster size (issue: Plan, item 6).

Run: .venv/bin/python benchmarks/bench_plan.py [--quick]

Each case runs in a fresh Python process with the graph disk cache off (HETPLAN_NO_CACHE=1)
and an empty profile store, so every figure is cold: the child reports its import time, graph
extraction and search (`hetplan.plan.search.search`, analytical compute model), and the
parent the whole wall time of the process (what `hetplan plan` costs a user). It prints a
markdown table and the fitted growth exponent of search time in the number of layers and of
devices (log-log least squares).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

T0 = time.perf_counter()
import numpy as np  # noqa: E402

from hetplan.cluster import load_cluster  # noqa: E402
from hetplan.cost.compute import AnalyticalCompute  # noqa: E402
from hetplan.graph import build_graph  # noqa: E402
from hetplan.plan.objective import parse_objective  # noqa: E402
from hetplan.plan.search import SearchOptions, search  # noqa: E402
from hetplan.planspec import ModelRef  # noqa: E402

IMPORT_S = time.perf_counter() - T0
CLUSTERS = Path(__file__).resolve().parent.parent / "examples" / "clusters"


def gpt(layers: int) -> str:
    return f"gpt:layers={layers},hidden=1024,heads=16,seq=512"


CASES = [
    # (model, dataset, cluster file, batch)
    ("vgg16", "imagenet", "edge.yaml", 32),
    ("vgg16", "imagenet", "hetero-2node.yaml", 256),
    ("resnet50", "imagenet", "hetero-2node.yaml", 256),
    (gpt(24), None, "big-64.yaml", 512),
    (gpt(48), None, "big-64.yaml", 512),
    (gpt(96), None, "big-64.yaml", 512),
    (gpt(96), None, "homogeneous-4gpu.yaml", 512),
    (gpt(96), None, "hetero-2node.yaml", 512),
]
QUICK = [0, 1, 5]


def run_case(model: str, dataset: str | None, cluster_file: str, batch: int) -> dict[str, float]:
    ref = ModelRef(name=model, dataset=dataset)
    t = time.perf_counter()
    graph = build_graph(ref)
    graph_s = time.perf_counter() - t
    cluster = load_cluster(CLUSTERS / cluster_file)
    opts = SearchOptions(batch=batch, objective=parse_objective("time"))
    t = time.perf_counter()
    ranking = search(ref, graph, cluster, AnalyticalCompute(), opts)
    search_s = time.perf_counter() - t
    return {
        "layers": len(graph.layers),
        "devices": len(cluster.devices),
        "graph_s": graph_s,
        "search_s": search_s,
        "screened": ranking.screened,
        "simulated": ranking.simulated,
        "best_s": ranking.best.metrics.time_s,
    }


def slope(xs: list[float], ys: list[float]) -> float:
    """Exponent k of y ~ x^k by least squares in log-log space."""
    if len(set(xs)) < 2:
        return math.nan
    k, _ = np.polyfit(np.log(xs), np.log(ys), 1)
    return float(k)


def in_child(index: int) -> dict[str, float]:
    """Run one case in a fresh interpreter; return its figures plus the process wall time."""
    env = dict(os.environ, HETPLAN_NO_CACHE="1", HETPLAN_PROFILE_DIR=tempfile.mkdtemp())
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, __file__, "--case", str(index)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    wall = time.perf_counter() - start
    return json.loads(out.strip().splitlines()[-1]) | {"wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--case", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case is not None:
        r = run_case(*CASES[args.case]) | {"import_s": IMPORT_S}
        print(json.dumps(r))
        return
    indices = QUICK if args.quick else list(range(len(CASES)))
    print(f"load average before: {os.getloadavg()[0]:.2f} (2 cores)\n")
    print(
        "| model | cluster | layers | devices | import s | graph s | search s |"
        " process wall s | screened | simulated |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for i in indices:
        model, _, cluster_file, _ = CASES[i]
        r = in_child(i)
        rows.append((model, cluster_file, r))
        print(
            f"| {model} | {cluster_file} | {r['layers']:.0f} | {r['devices']:.0f} | "
            f"{r['import_s']:.2f} | {r['graph_s']:.2f} | {r['search_s']:.2f} | "
            f"{r['wall_s']:.2f} | {r['screened']:.0f} | {r['simulated']:.0f} |",
            flush=True,
        )
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    big = [r for _, c, r in rows if c == "big-64.yaml"]
    gpt96 = [r for m, _, r in rows if m == gpt(96)]
    if len(big) > 1:
        k = slope([r["layers"] for r in big], [r["search_s"] for r in big])
        print(f"search time ~ layers^{k:.2f} (big-64.yaml, GPT {[int(r['layers']) for r in big]})")
    if len(gpt96) > 1:
        k = slope([r["devices"] for r in gpt96], [r["search_s"] for r in gpt96])
        print(f"search time ~ devices^{k:.2f} (96-block GPT, {[int(r['devices']) for r in gpt96]})")


if __name__ == "__main__":
    main()
