"""Planner speed on generated datacenter clusters (issue: plan for a datacenter in seconds).

Run: .venv/bin/python benchmarks/bench_plan_scale.py [--quick | --exact]
         [--model M] [--devices N,...]

Clusters of four GPU types (A100-80GB, V100-32GB, RTX3090, T4) in 8-GPU nodes, equal node
counts per type, on 100 GbE (``hetplan.cluster.generate``), of 64, 1,024 and 10,000 devices;
gpt2 and a 96-block GPT at batch 2048 (analytical compute model, empty profile store, graph
cache warm as a user's second run would have it). Each case runs ``hetplan plan`` as a child
process: the table gives its wall time and peak resident memory (``os.wait4``), the search's
own seconds (``--json``), its CPU seconds (user + sys: steadier than wall time on a loaded
machine), and each as a ratio to the first case of the same model in the same run (the
machine is shared: ratios are steadier than absolute times). ``--model`` and ``--devices``
run some of the cases (``--model gpt:layers=96,hidden=1024,heads=16,seq=512 --devices 1024``).

``--exact`` runs the same two models on the largest clusters of the exact regime instead (at
most MAX_EXHAUSTIVE_SUBSETS subset orbits), where the screening prices every family on every
subset (issue 27): the planner's worst case below the datacenter sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hetplan.cluster import load_cluster
from hetplan.cluster.config import write_cluster_config
from hetplan.cluster.generate import generate_config
from hetplan.plan.classes import orbit_count, symmetry

TYPES = ("A100-80GB", "V100-32GB", "RTX3090", "T4")
MODELS = ("gpt2", "gpt:layers=96,hidden=1024,heads=16,seq=512")
SIZES = (64, 1024, 10_000)
Env = dict[str, str]
BATCH = 2048
EXACT_CLUSTERS: dict[str, tuple[list[tuple[str, int]], int]] = {
    # name: (device type and node count, devices per node); each at most 256 orbits
    "exact-2type-16": ([("A100-80GB", 2), ("T4", 2)], 4),  # 225 orbits: two types, four nodes
    "exact-1type-24": ([("A100-80GB", 3)], 8),  # 165 orbits: three 8-GPU nodes
    "exact-1node-255": ([("A100-80GB", 1)], 255),  # 256 orbits: the most devices it allows
}


def cluster_file(devices: int, folder: Path) -> Path:
    nodes = devices // 8
    per_type = [nodes // len(TYPES) + (i < nodes % len(TYPES)) for i in range(len(TYPES))]
    path = folder / f"gen-{devices}.yaml"
    write_cluster_config(path, generate_config(list(zip(TYPES, per_type, strict=True))))
    return path


def exact_file(name: str, folder: Path) -> Path:
    types, per_node = EXACT_CLUSTERS[name]
    path = folder / f"{name}.yaml"
    write_cluster_config(path, generate_config(types, per_node=per_node, name=name))
    return path


def run_plan(model: str, cluster: Path, env: Env) -> dict[str, float | str]:
    out = cluster.with_suffix(".plan.json")
    argv = [sys.executable, "-m", "hetplan", "plan", "--model", model, "--cluster", str(cluster)]
    argv += ["--batch", str(BATCH), "--analytical", "--out", str(out), "--json"]
    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=out_f, stderr=err_f)
        _, status, usage = os.wait4(proc.pid, 0)  # reaps it: peak RSS of this child alone
        wall = time.perf_counter() - start
        out_f.seek(0)
        err_f.seek(0)
        stdout, stderr = out_f.read(), err_f.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{model} on {cluster.name}: {stderr.decode()[-2000:]}")
    data = json.loads(stdout)
    rss = usage.ru_maxrss / 1e6  # kilobytes on Linux -> GB
    return {
        "wall_s": wall,
        "search_s": data["search_seconds"],
        "rss_gb": rss,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "screened": data["screened"],
        "simulated": data["simulated"],
        "best": data["best"]["label"],
    }


def datacenter(models: tuple[str, ...], sizes: tuple[int, ...], folder: Path, env: Env) -> None:
    print("| model | devices | wall s | search s | CPU s | peak RSS GB | wall / first |"
          " search / first | screened | simulated | pick |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for model in models:
        run_plan(model, cluster_file(64, folder), env)  # warm the graph cache
        base: dict[str, float | str] = {}
        for devices in sizes:
            r = run_plan(model, cluster_file(devices, folder), env)
            base = base or r
            print(
                f"| {model} | {devices:,} | {r['wall_s']:.2f} | {r['search_s']:.2f} | "
                f"{r['cpu_s']:.2f} | {r['rss_gb']:.2f} | "
                f"{float(r['wall_s']) / float(base['wall_s']):.2f} | "
                f"{float(r['search_s']) / float(base['search_s']):.2f} | {r['screened']} | "
                f"{r['simulated']} | {r['best']} |",
                flush=True,
            )


def exact(models: tuple[str, ...], folder: Path, env: Env) -> None:
    print("| model | cluster | devices | orbits | wall s | search s | peak RSS GB | screened |"
          " simulated | pick |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model in models:
        run_plan(model, cluster_file(64, folder), env)  # warm the graph cache
        for name in EXACT_CLUSTERS:
            path = exact_file(name, folder)
            cluster = load_cluster(path)
            r = run_plan(model, path, env)
            print(
                f"| {model} | {name} | {len(cluster.devices)} | {orbit_count(symmetry(cluster))}"
                f" | {r['wall_s']:.2f} | {r['search_s']:.2f} | {r['rss_gb']:.2f} |"
                f" {r['screened']} | {r['simulated']} | {r['best']} |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser()
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="gpt2 only, 64 and 1,024 devices")
    mode.add_argument("--exact", action="store_true", help="the largest exact-regime clusters")
    parser.add_argument("--model", action="append", help="only this model (repeatable)")
    parser.add_argument("--devices", help="only these cluster sizes, e.g. 1024,10000")
    args = parser.parse_args()
    sizes: tuple[int, ...] = SIZES[:2] if args.quick else SIZES
    models: tuple[str, ...] = MODELS[:1] if args.quick else MODELS
    if args.devices:
        sizes = tuple(int(n) for n in args.devices.split(","))
    if args.model:
        models = tuple(args.model)
    folder = Path(tempfile.mkdtemp())
    env = dict(os.environ, HETPLAN_PROFILE_DIR=str(folder / "profiles"))
    print(f"load average before: {os.getloadavg()[0]:.2f} (2 cores)\n")
    if args.exact:
        exact(models, folder, env)
    else:
        datacenter(models, sizes, folder, env)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
