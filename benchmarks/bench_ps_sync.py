"""Parameter-server sync time of a planner-sized candidate: 1,024 workers co-located with
1,024 shards on 128 nodes x 8 devices, 150 gradient tensors of random sizes ("size" policy),
aggregated model against the per-pair reference it replaced (kept in the tests).
Target: the aggregated one well under 20 ms per call.

Run: ``.venv/bin/python benchmarks/bench_ps_sync.py [--nodes 128] [--old-runs 1]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import cast

from hetplan.cluster.spec import Cluster, Device, DeviceType, Link
from hetplan.cost.comm_ps import PsTiming, ps_sync_time

ROOT = Path(__file__).resolve().parent.parent
GPU = DeviceType(
    name="bench-gpu",
    peak_flops={"fp32": 1e14},
    memory_bandwidth=2e12,
    memory_bytes=80e9,
    idle_power_w=60.0,
    max_power_w=700.0,
)


def reference() -> ModuleType:
    """The test module that holds the per-pair reference implementation."""
    path = ROOT / "tests" / "cost" / "test_comm_ps_scale.py"
    spec = importlib.util.spec_from_file_location("ps_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while defining
    spec.loader.exec_module(module)
    return module


def cluster(nodes: int) -> Cluster:
    devices = tuple(
        Device(id=f"n{i}.{j}", type=GPU, node=f"n{i}", index=j)
        for i in range(nodes)
        for j in range(8)
    )
    names = [f"n{i}" for i in range(nodes)]
    return Cluster(
        name="bench",
        devices=devices,
        intra_links=dict.fromkeys(names, Link(kind="nvlink", bandwidth=3e11, latency_s=2e-6)),
        network=dict.fromkeys(names, Link(kind="ib", bandwidth=2.5e10, latency_s=5e-6)),
    )


def timed(fn: Callable[[], object], runs: int) -> float:
    """Median seconds of ``runs`` calls."""
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--old-runs", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(0)
    c = cluster(args.nodes)
    devices = [d.id for d in c.devices]
    sizes = [rng.choice([4 * 1024, rng.randint(1, 64) * 2**20]) for _ in range(150)]

    ref = reference().reference_ps_sync_time

    def new() -> object:
        return ps_sync_time(sizes, devices, devices, c, policy="size")

    def old() -> tuple[PsTiming, dict[str, float]]:
        return cast(
            tuple[PsTiming, dict[str, float]], ref(sizes, devices, devices, c, policy="size")
        )

    new_s, old_s = timed(new, 20), timed(old, args.old_runs)
    a, (b, _) = ps_sync_time(sizes, devices, devices, c, policy="size"), old()
    same = abs(a.sync_s - b.sync_s) <= 1e-9 * b.sync_s and a.bottleneck == b.bottleneck
    print(f"{len(devices)} workers = shards on {args.nodes} nodes x 8, {len(sizes)} tensors")
    print(f"aggregated (median of 20): {new_s * 1e3:8.2f} ms")
    print(f"per-pair   (median of {args.old_runs}):  {old_s * 1e3:8.1f} ms")
    print(f"speed-up: {old_s / new_s:.0f}x; sync_s {a.sync_s:.6g} s, same as reference: {same}")


if __name__ == "__main__":
    main()
