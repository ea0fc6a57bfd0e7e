"""Energy of a measured run: metered where every device is covered, modelled otherwise
(hand-computed figures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hetplan.cluster import load_cluster
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.run.measure import summarize
from hetplan.run.train import with_energy
from hetplan.run.tune import idle_watts

CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "local-cpu-hetero.yaml"


def _raw(rank: int, device: str, kind: str, energy: list[float], source: str | None) -> Any:
    return {
        "rank": rank, "device": device, "device_kind": kind, "pipeline": rank, "stage": 0,
        "step_s": [2.0, 1.0, 1.0, 1.0], "forward_s": [0.3] * 4, "backward_s": [0.4] * 4,
        "optimizer_s": [0.1] * 4, "loss": [1.0, 0.9, 0.8, 0.7], "peak_memory_bytes": 1,
        "memory_source": "tensor bytes", "actions": [], "energy_j": energy,
        "energy_source": source,
    }  # fmt: skip


def _plan(devices: list[str]) -> Plan:
    pipes = [PipelinePlan(stages=[StagePlan(layers=["0"], devices=[d])], batch=4) for d in devices]
    return Plan(
        model=ModelRef(name="m"), strategy="dp", global_batch=4 * len(devices), micro_batches=1,
        pipelines=pipes,
    )  # fmt: skip


def test_cpu_ranks_metered_once_per_node_by_rapl() -> None:
    raw = [
        _raw(0, "a", "cpu", [9.0, 5.0, 7.0, 6.0], "rapl"),  # local rank 0 reads the packages
        _raw(1, "b", "cpu", [], None),
    ]
    m = summarize(_plan(["a", "b"]), raw, warmup=1)
    assert m.energy_j_per_iteration == 6.0  # (5 + 7 + 6) / 3 timed steps
    assert m.energy_source == "measured (rapl)"


def test_gpu_ranks_each_metered_add_up() -> None:
    raw = [
        _raw(0, "a", "cuda:0", [0.0, 100.0, 110.0, 120.0], "nvml"),
        _raw(1, "b", "cuda:1", [0.0, 50.0, 40.0, 60.0], "nvml"),
    ]
    m = summarize(_plan(["a", "b"]), raw, warmup=1)
    assert m.energy_j_per_iteration == 160.0  # (150 + 150 + 180) / 3: the window's advance


def test_a_gap_in_the_meters_falls_back_to_the_model() -> None:
    cluster = load_cluster(CLUSTER)
    a, b = (d.id for d in cluster.devices[:2])
    raw = [
        _raw(0, a, "cuda:0", [0.0, 100.0, 110.0, 120.0], "nvml"),
        _raw(1, b, "cpu", [], None),  # a CPU rank beside a GPU one, no RAPL: not covered
    ]
    m = summarize(_plan([a, b]), raw, warmup=1)
    assert m.energy_j_per_iteration is None
    m = with_energy(m, cluster)
    # Each rank busy 0.3 + 0.4 + 0.1 = 0.8 s of the 1 s iteration: P = idle + 0.8 (max - idle).
    expected = sum(
        (t.idle_power_w + 0.8 * (t.max_power_w - t.idle_power_w)) * 1.0
        for t in (cluster.device(a).type, cluster.device(b).type)
    )
    assert m.energy_j_per_iteration == pytest.approx(expected)
    assert m.energy_source.startswith("modelled")


def test_a_rapl_reading_already_holds_the_unused_cpus_of_its_node() -> None:
    cluster = load_cluster(CLUSTER)
    a, b, c = (d.id for d in cluster.devices)
    plan = _plan([a, b])
    raw = [_raw(0, a, "cpu", [9.0, 5.0, 7.0, 6.0], "rapl"), _raw(1, b, "cpu", [], None)]
    m = summarize(plan, raw, warmup=1)
    assert idle_watts(plan, cluster) == cluster.device(c).type.idle_power_w  # modelled idle
    assert idle_watts(plan, cluster, m) == 0.0  # inside the package reading
    unmetered = summarize(
        plan, [_raw(0, a, "cpu", [], None), _raw(1, b, "cpu", [], None)], warmup=1
    )
    assert idle_watts(plan, cluster, unmetered) == cluster.device(c).type.idle_power_w
