"""Small hand-built clusters and layers for the cost tests (no YAML loader)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from hetplan.cluster.spec import Cluster, Device, DeviceType, Link

GPU = DeviceType(
    name="toy-gpu",
    peak_flops={"fp32": 1e12, "fp16": 4e12},
    memory_bandwidth=1e11,
    memory_bytes=16e9,
    idle_power_w=50.0,
    max_power_w=250.0,
    compute_efficiency=1.0,
    memory_efficiency=1.0,
    kernel_overhead_s=0.0,
)

ClusterFactory = Callable[..., Cluster]


def build_cluster(
    per_node: Sequence[int],
    *,
    intra_bw: float = 1e10,
    intra_lat: float = 1e-6,
    net_bw: float = 1e9,
    net_lat: float = 1e-5,
    overhead: float = 0.0,
    pair_links: dict[tuple[str, str], Link] | None = None,
) -> Cluster:
    """Nodes ``n0, n1, ...`` with ``per_node[i]`` devices ``n<i>.<j>`` each."""
    devices = tuple(
        Device(id=f"n{i}.{j}", type=GPU, node=f"n{i}", index=j)
        for i, count in enumerate(per_node)
        for j in range(count)
    )
    nodes = [f"n{i}" for i in range(len(per_node))]
    return Cluster(
        name="toy",
        devices=devices,
        intra_links={n: Link(kind="intra", bandwidth=intra_bw, latency_s=intra_lat) for n in nodes},
        pair_links=pair_links or {},
        network={n: Link(kind="net", bandwidth=net_bw, latency_s=net_lat) for n in nodes},
        collective_overhead_s=overhead,
    )


@pytest.fixture
def make_cluster() -> ClusterFactory:
    return build_cluster


@pytest.fixture
def gpu() -> DeviceType:
    """A device type with round numbers: 1 TFLOP/s fp32, 100 GB/s, efficiencies 1."""
    return GPU


GlooWorker = Callable[[str, int], list[Any]]


@pytest.fixture
def gloo_worker(tmp_path: Path) -> GlooWorker:
    """Runs a worker script's source (``argv``: a file store, an output prefix; every rank
    writes JSON to ``<prefix>.<rank>``) and returns each rank's JSON, by rank."""

    def run(source: str, ranks: int) -> list[Any]:
        script, out = tmp_path / "worker.py", tmp_path / "out"
        script.write_text(source)
        subprocess.run(
            [sys.executable, str(script), str(tmp_path / "store"), str(out)],
            check=True, timeout=120, capture_output=True,
        )  # fmt: skip
        return [json.loads(Path(f"{out}.{rank}").read_text()) for rank in range(ranks)]

    return run
