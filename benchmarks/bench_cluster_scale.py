"""``hetplan cluster show`` on generated datacenter-sized clusters.

Run: ``.venv/bin/python benchmarks/bench_cluster_scale.py [--repeat N] [--keep DIR]``.
Writes each cluster with ``generate_config`` and prints a markdown table: the wall time and
peak RSS of ``hetplan cluster show FILE`` as a fresh process (start-up, YAML parse, summary,
table), and in this process the parse-and-validate time (``load_cluster_config``) and the
summary time (``summarize_config``), medians over ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from hetplan.cluster import load_cluster_config, write_cluster_config
from hetplan.cluster.generate import generate_config
from hetplan.cluster.summary import summarize_config

TYPES = ("A100-80GB", "V100-32GB", "RTX3090", "T4")

CASES: list[tuple[str, list[tuple[str, int]], int]] = [
    # label, (type, nodes) per type, devices per node
    ("1,000,000 devices: 1 node", [("A100-80GB", 1)], 1_000_000),
    (
        "10,000 devices: 1,250 nodes of 8, 4 types",
        list(zip(TYPES, (313, 312, 313, 312), strict=True)),
        8,
    ),
    ("1,024 devices: 128 nodes of 8, 4 types", [(t, 32) for t in TYPES], 8),
    ("80,000 devices: 10,000 nodes of 8, 4 types", [(t, 2500) for t in TYPES], 8),
]


def show_process(path: Path) -> tuple[float, float]:
    """(wall seconds, peak RSS in MiB) of ``hetplan cluster show path`` in a new process."""
    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "hetplan", "cluster", "show", str(path)],
        stdout=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"hetplan cluster show {path} failed ({child.returncode})")
    return wall, usage.ru_maxrss / 1024  # KiB on Linux


def median_s(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def row(label: str, path: Path, repeat: int) -> str:
    runs = [show_process(path) for _ in range(repeat)]
    wall = statistics.median(w for w, _ in runs)
    rss = max(r for _, r in runs)
    parse = median_s(lambda: load_cluster_config(path), repeat)
    config = load_cluster_config(path)
    summary = median_s(lambda: summarize_config(config, str(path)), repeat)
    size = path.stat().st_size / 1024
    return f"| {label} | {size:,.1f} | {wall:.2f} | {rss:.0f} | {parse:.3f} | {1e3 * summary:.1f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="Write the cluster files here (kept).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hetplan-scale-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, median of {args.repeat}")
        print()
        print(
            "| cluster | file KiB | `cluster show` wall s | peak RSS MiB | parse s | summary ms |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        for k, (label, types, per_node) in enumerate(CASES):
            path = folder / f"scale-{k}.yaml"
            write_cluster_config(path, generate_config(types, per_node=per_node))
            print(row(label, path, args.repeat), flush=True)


if __name__ == "__main__":
    main()
