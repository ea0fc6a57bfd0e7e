import copy
from pathlib import Path
from typing import Any

import pytest

from hetplan.cluster import (
    DEVICE_CATALOG,
    cluster_from_data,
    cluster_to_config,
    config_from_data,
    config_to_data,
    load_cluster,
    load_cluster_config,
    write_cluster_config,
)
from hetplan.cluster.spec import DEFAULT_COLLECTIVE_OVERHEAD_S, Cluster, Device, Link
from hetplan.errors import InputError

EXAMPLES = sorted((Path(__file__).parents[2] / "examples" / "clusters").glob("*.yaml"))

TWO_NODES: dict[str, Any] = {
    "name": "t",
    "nodes": [
        {
            "name": "a",
            "devices": [{"type": "V100-32GB", "count": 3}],
            "link": {"type": "NVLink2"},
            "pairs": [{"between": [0, 1], "link": {"bandwidth_GBps": 100, "latency_us": 1}}],
        },
        {
            "name": "b",
            "devices": [{"type": "t4", "count": 2}],
            "link": {"type": "PCIe3x16"},
            "network": {"type": "1GbE"},
        },
    ],
    "network": {"type": "10GbE"},
    "pairs": [{"between": ["a.1", "b.1"], "link": {"bandwidth_gbit": 40, "latency_us": 7}}],
}


def two_nodes() -> Cluster:
    return cluster_from_data(copy.deepcopy(TWO_NODES), "t.yaml")


def test_ids_types_and_nodes() -> None:
    c = two_nodes()
    assert [d.id for d in c.devices] == ["a.0", "a.1", "a.2", "b.0", "b.1"]
    assert c.nodes == ("a", "b")
    assert c.device("b.1").type is DEVICE_CATALOG["T4"]  # case-insensitive catalog name
    assert (c.device("a.2").node, c.device("a.2").index) == ("a", 2)
    assert c.collective_overhead_s == pytest.approx(DEFAULT_COLLECTIVE_OVERHEAD_S)


def test_link_resolution_intra_inter_and_pairs() -> None:
    c = two_nodes()
    # node pair override
    assert c.link("a.0", "a.1") == Link(kind="custom", bandwidth=100e9, latency_s=1e-6)
    # node default
    assert c.link("a.0", "a.2") == Link(kind="NVLink2", bandwidth=45e9, latency_s=2e-6)
    assert c.link("b.0", "b.1").kind == "PCIe3x16"
    # between nodes: the slower side (b's own 1GbE override), latencies of both sides added
    inter = c.link("a.0", "b.0")
    assert inter.kind == "1GbE"
    assert inter.bandwidth == pytest.approx(125e6 * 0.94)
    assert inter.latency_s == pytest.approx(max(20e-6, 50e-6))
    # top-level pair override across nodes, Gbit/s converted to bytes/s
    assert c.link("b.1", "a.1") == Link(kind="custom", bandwidth=5e9, latency_s=7e-6)


def test_link_is_symmetric() -> None:
    c = two_nodes()
    ids = [d.id for d in c.devices]
    for a in ids:
        for b in ids:
            if a != b:
                assert c.link(a, b) == c.link(b, a)


def test_catalog_link_with_overrides() -> None:
    data = copy.deepcopy(TWO_NODES)
    data["network"] = {"type": "10GbE", "latency_us": 5}
    data["nodes"][1].pop("network")
    c = cluster_from_data(data, "t.yaml")
    assert c.network["a"] == Link(kind="10GbE", bandwidth=1.25e9 * 0.94, latency_s=5e-6)
    assert c.link("a.2", "b.0").latency_s == pytest.approx(5e-6)  # end to end, not summed


def test_custom_and_overridden_device_types() -> None:
    data = {
        "name": "custom",
        "device_types": {
            "v100-32gb": {"compute_efficiency": 0.3, "kernel_overhead_us": 12},
            "HalfA100": {"base": "A100-40GB", "memory_GiB": 20, "price_per_hour": 1.5},
            "Npu": {
                "peak_tflops": {"fp32": 10, "fp16": 40},
                "memory_GiB": 8,
                "memory_bandwidth_GBps": 200,
                "idle_power_w": 5,
                "max_power_w": 50,
            },
        },
        "nodes": [
            {
                "name": "n",
                "devices": [{"type": "V100-32GB"}, {"type": "halfa100"}, {"type": "Npu"}],
                "link": {"type": "PCIe4x16"},
            }
        ],
        "collective_overhead_us": 100,
    }
    c = cluster_from_data(data, "c.yaml")
    v100, half, npu = (d.type for d in c.devices)
    base = DEVICE_CATALOG["V100-32GB"]
    assert v100.name == "V100-32GB"
    assert (v100.compute_efficiency, v100.kernel_overhead_s) == (0.3, pytest.approx(12e-6))
    assert v100.peak_flops == base.peak_flops and v100.memory_bytes == base.memory_bytes
    assert half.name == "HalfA100"
    assert half.memory_bytes == 20 * 2**30 and half.price_per_hour == 1.5
    assert half.peak_flops == DEVICE_CATALOG["A100-40GB"].peak_flops
    assert npu.peak_flops == {"fp32": 10e12, "fp16": 40e12}
    assert (npu.memory_bytes, npu.memory_bandwidth) == (8 * 2**30, 200e9)
    assert (npu.idle_power_w, npu.max_power_w, npu.price_per_hour) == (5, 50, None)
    assert c.collective_overhead_s == pytest.approx(100e-6)


def test_cpu_pinning_and_speed() -> None:
    c = load_cluster(Path(__file__).parents[2] / "examples/clusters/local-cpu-hetero.yaml")
    assert [d.id for d in c.devices] == ["local.0", "local.1", "local.2"]
    assert [d.speed for d in c.devices] == [1.0, 0.5, 0.5]
    assert [d.cpus for d in c.devices] == [(0,), (1,), (1,)]
    assert {d.type.name for d in c.devices} == {"cpu"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_loads_and_round_trips(path: Path, tmp_path: Path) -> None:
    cluster = load_cluster(path)
    config = load_cluster_config(path)
    assert config_from_data(config_to_data(config), "x") == config
    out = tmp_path / path.name
    write_cluster_config(out, config)
    assert load_cluster(out) == cluster
    assert "null" not in out.read_text()  # None fields are left out


def test_expected_examples_exist() -> None:
    names = {p.stem for p in EXAMPLES}
    assert {"homogeneous-4gpu", "hetero-2node", "edge", "big-64", "local-cpu", "local-cpu-4on2",
            "local-cpu-hetero"} <= names  # fmt: skip


def test_big_64_shape() -> None:
    c = load_cluster(Path(__file__).parents[2] / "examples/clusters/big-64.yaml")
    assert len(c.devices) == 64 and len(c.nodes) == 8
    assert len({d.type.name for d in c.devices}) == 4


def test_cluster_built_in_code_links_and_lookups() -> None:
    t = DEVICE_CATALOG["T4"]
    devs = tuple(
        Device(id=f"{n}.{i}", type=t, node=n, index=i) for n in ("x", "y") for i in range(2)
    )
    fast = Link(kind="f", bandwidth=10.0, latency_s=1.0)
    slow = Link(kind="s", bandwidth=2.0, latency_s=3.0)
    c = Cluster(name="c", devices=devs, intra_links={"x": fast}, network={"x": fast, "y": slow})
    assert c.device("y.1") is devs[3]
    assert c.link("x.0", "y.0") == Link(kind="s", bandwidth=2.0, latency_s=3.0)
    with pytest.raises(InputError, match=r"unknown device id 'z.0' in cluster 'c'"):
        c.device("z.0")
    with pytest.raises(InputError, match=r"node 'y' has no intra-node link"):
        c.link("y.0", "y.1")
    with pytest.raises(InputError, match=r"duplicate device id 'x.0'"):
        Cluster(name="d", devices=(devs[0], devs[0]), intra_links={})


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_cluster_to_config_round_trips_examples(path: Path, tmp_path: Path) -> None:
    cluster = load_cluster(path)
    out = tmp_path / "out.yaml"
    write_cluster_config(out, cluster_to_config(cluster))
    assert load_cluster(out) == cluster


def test_cluster_to_config_round_trips_custom_figures(tmp_path: Path) -> None:
    data = copy.deepcopy(TWO_NODES)
    data["device_types"] = {
        "t4": {"compute_efficiency": 0.25},
        "Npu": {"peak_tflops": {"fp32": 3.3}, "memory_GiB": 1.5, "memory_bandwidth_GBps": 77.7,
                "idle_power_w": 2, "max_power_w": 9},
    }  # fmt: skip
    data["nodes"][1]["devices"].append({"type": "Npu", "count": 2, "speed": 0.5})
    data["nodes"][0]["pairs"].append({"between": [2, 0], "link": {"type": "PCIe4x16"}})
    data["collective_overhead_us"] = 12.5
    data["collective_step_latency_us"] = 640
    data["collective_step_bandwidth_GBps"] = 0.77
    cluster = cluster_from_data(data, "t.yaml")
    out = tmp_path / "out.yaml"
    write_cluster_config(out, cluster_to_config(cluster))
    again = load_cluster(out)
    assert again.devices == cluster.devices
    assert again.network == cluster.network and again.intra_links == cluster.intra_links
    assert again.collective_overhead_s == cluster.collective_overhead_s
    assert again.collective_step_s == pytest.approx(640e-6, rel=1e-12)
    assert again.collective_bandwidth == pytest.approx(0.77e9, rel=1e-12)
    assert again.pair_links.keys() == cluster.pair_links.keys()
    for key, link in cluster.pair_links.items():
        got = again.pair_links[key]
        assert got.kind == link.kind
        assert got.bandwidth == pytest.approx(link.bandwidth, rel=1e-12)
        assert got.latency_s == pytest.approx(link.latency_s, rel=1e-12)


def test_cluster_to_config_rejects_foreign_ids() -> None:
    t = DEVICE_CATALOG["T4"]
    c = Cluster(name="c", devices=(Device(id="gpu0", type=t, node="x", index=0),), intra_links={})
    with pytest.raises(InputError, match=r"device id 'gpu0' is not <node>.<index>"):
        cluster_to_config(c)
