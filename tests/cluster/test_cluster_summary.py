import dataclasses
import random
import time
from collections import Counter
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

from hetplan.cluster import cluster_from_data, config_from_data, load_cluster, summarize
from hetplan.cluster.config import load_cluster_config
from hetplan.cluster.spec import Cluster
from hetplan.cluster.summary import (
    MAX_DEVICES,
    ClusterSummary,
    PairLink,
    summarize_config,
)
from hetplan.errors import InputError
from hetplan.serde import to_data

EXAMPLES = Path(__file__).parents[2] / "examples" / "clusters"
GiB = 2**30


def test_hetero_2node_summary_by_hand() -> None:
    s = summarize(load_cluster(EXAMPLES / "hetero-2node.yaml"))
    assert s.num_devices == 8
    assert [(n.name, n.devices, n.intra_link, n.network) for n in s.nodes] == [
        ("v100", {"V100-32GB": 4}, "NVLink2", "10GbE"),
        ("t4", {"T4": 4}, "PCIe3x16", "10GbE"),
    ]
    assert s.device_counts == {"V100-32GB": 4, "T4": 4}
    assert s.total_memory_bytes == 4 * 32 * GiB + 4 * 16 * GiB
    assert s.total_fp32_flops == pytest.approx(4 * 15.7e12 + 4 * 8.1e12)
    assert s.total_fp16_flops == pytest.approx(4 * 125e12 + 4 * 65e12)
    slow, fast = s.slowest_link, s.fastest_link
    assert slow is not None and fast is not None
    assert (slow.a, slow.b, slow.kind) == ("v100.0", "t4.0", "10GbE")
    assert slow.bandwidth == pytest.approx(1.25e9 * 0.94)
    assert slow.latency_s == pytest.approx(20e-6)
    assert (fast.a, fast.b, fast.kind, fast.bandwidth) == ("v100.0", "v100.1", "NVLink2", 45e9)


def test_speed_scales_compute_not_memory() -> None:
    s = summarize(load_cluster(EXAMPLES / "local-cpu-hetero.yaml"))
    assert s.total_fp32_flops == pytest.approx(0.096e12 * (1 + 0.5 + 0.5))
    assert s.total_fp16_flops == s.total_fp32_flops  # cpu has no fp16 figure: fp32 fallback
    assert s.total_memory_bytes == 3 * 8 * GiB


def test_slowest_prefers_higher_latency_on_equal_bandwidth() -> None:
    data = {
        "name": "t",
        "nodes": [
            {
                "name": "n",
                "devices": [{"type": "T4", "count": 3}],
                "link": {"bandwidth_GBps": 10, "latency_us": 5},
                "pairs": [{"between": [1, 2], "link": {"bandwidth_GBps": 10, "latency_us": 9}}],
            }
        ],
    }
    s = summarize(cluster_from_data(data, "t"))
    assert s.slowest_link is not None and s.fastest_link is not None
    assert (s.slowest_link.a, s.slowest_link.b) == ("n.1", "n.2")
    assert (s.fastest_link.a, s.fastest_link.b) == ("n.0", "n.1")


def test_single_device_has_no_links() -> None:
    data = {"name": "one", "nodes": [{"name": "n", "devices": [{"type": "L4"}]}]}
    s = summarize(cluster_from_data(data, "t"))
    assert s.slowest_link is None and s.fastest_link is None
    assert s.nodes[0].intra_link is None and s.nodes[0].network is None


# --- the O(n^2) implementation this module had, kept as the reference -----------------------


def _reference_extremes(cluster: Cluster) -> tuple[PairLink | None, PairLink | None]:
    slow: PairLink | None = None
    fast: PairLink | None = None
    for da, db in combinations(cluster.devices, 2):
        link = cluster.link(da.id, db.id)
        pair = PairLink(
            a=da.id, b=db.id, kind=link.kind, bandwidth=link.bandwidth, latency_s=link.latency_s
        )
        if slow is None or (pair.bandwidth, -pair.latency_s) < (slow.bandwidth, -slow.latency_s):
            slow = pair
        if fast is None or (pair.bandwidth, -pair.latency_s) > (fast.bandwidth, -fast.latency_s):
            fast = pair
    return slow, fast


def _reference(cluster: Cluster) -> ClusterSummary:
    from hetplan.cluster.summary import NodeSummary

    nodes = []
    for node in cluster.nodes:
        counts = Counter(d.type.name for d in cluster.devices if d.node == node)
        intra = cluster.intra_links.get(node)
        net = cluster.network.get(node)
        nodes.append(
            NodeSummary(
                name=node,
                devices=dict(counts),
                intra_link=intra.kind if intra is not None else None,
                network=net.kind if net is not None else None,
            )
        )
    slow, fast = _reference_extremes(cluster)
    return ClusterSummary(
        name=cluster.name,
        num_devices=len(cluster.devices),
        nodes=nodes,
        device_counts=dict(Counter(d.type.name for d in cluster.devices)),
        total_memory_bytes=sum(d.type.memory_bytes for d in cluster.devices),
        total_fp32_flops=sum(d.type.flops("fp32") * d.speed for d in cluster.devices),
        total_fp16_flops=sum(d.type.flops("fp16") * d.speed for d in cluster.devices),
        slowest_link=slow,
        fastest_link=fast,
        collective_overhead_s=cluster.collective_overhead_s,
        collective_step_s=cluster.collective_step_s,
        collective_bandwidth=cluster.collective_bandwidth,
    )


TOTALS = ("total_memory_bytes", "total_fp32_flops", "total_fp16_flops")


def _assert_same(got: ClusterSummary, ref: ClusterSummary) -> None:
    # count x figure against a per-device sum: equal up to float rounding; the rest exactly.
    for name in TOTALS:
        assert getattr(got, name) == pytest.approx(getattr(ref, name), rel=1e-12), name
    same = dataclasses.replace(got, **{name: getattr(ref, name) for name in TOTALS})
    assert to_data(same) == to_data(ref)


def _check(data: dict[str, Any]) -> ClusterSummary:
    """Both fast paths (resolved cluster, cluster file) against the reference."""
    ref = _reference(cluster_from_data(data, "t"))
    _assert_same(summarize(cluster_from_data(data, "t")), ref)
    _assert_same(summarize_config(config_from_data(data, "t"), "t"), ref)
    return ref


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_examples_match_reference(path: Path) -> None:
    ref = _reference(load_cluster(path))
    _assert_same(summarize(load_cluster(path)), ref)
    _assert_same(summarize_config(load_cluster_config(path), str(path)), ref)


# Figures that tie on purpose: 10GbE is 1.175 GB/s at 20 us, and so is the first custom link
# (another kind); NVLink2 is 45 GB/s at 2 us.
NETS: list[dict[str, Any]] = [
    {"type": "10GbE"},
    {"type": "1GbE"},
    {"type": "EDR"},
    {"bandwidth_GBps": 1.175, "latency_us": 20},
    {"bandwidth_GBps": 1.175, "latency_us": 50},
    {"bandwidth_GBps": 12, "latency_us": 20},
]
LINKS: list[dict[str, Any]] = [
    {"type": "NVLink2"},
    {"type": "PCIe3x16"},
    {"bandwidth_GBps": 45, "latency_us": 2},
    {"bandwidth_GBps": 45, "latency_us": 9},
    {"bandwidth_GBps": 1.175, "latency_us": 20},
    {"bandwidth_GBps": 0.5, "latency_us": 20},
]
TYPES = ("T4", "V100-32GB", "cpu", "A100-80GB")


def _random_cluster(rng: random.Random) -> dict[str, Any]:
    nodes: list[dict[str, Any]] = []
    for k in range(rng.randint(1, 5)):
        groups = [
            {"type": rng.choice(TYPES), "count": rng.randint(1, 3), "speed": rng.choice((1, 0.5))}
            for _ in range(rng.randint(1, 2))
        ]
        size = sum(g["count"] for g in groups)
        node: dict[str, Any] = {"name": f"n{k}", "devices": groups}
        if size > 1 or rng.random() < 0.3:
            node["link"] = rng.choice(LINKS)
        if rng.random() < 0.4:
            node["network"] = rng.choice(NETS)
        inside = list(combinations(range(size), 2))
        chosen = inside if rng.random() < 0.2 else rng.sample(inside, rng.randint(0, len(inside)))
        node["pairs"] = [{"between": list(p), "link": rng.choice(LINKS + NETS)} for p in chosen]
        nodes.append(node)
    ids = [f"{n['name']}.{i}" for n in nodes for i in range(sum(g["count"] for g in n["devices"]))]
    across = [(a, b) for a, b in combinations(ids, 2) if a.split(".")[0] != b.split(".")[0]]
    # Up to every pair between nodes: whole node pairs overridden (single-device nodes: one
    # override does it) take the best figures away from the default links.
    chosen = rng.sample(across, rng.randint(0, len(across))) if across else []
    pairs = [{"between": list(p), "link": rng.choice(LINKS + NETS)} for p in chosen]
    return {"name": "r", "nodes": nodes, "network": rng.choice(NETS), "pairs": pairs}


@pytest.mark.parametrize("seed", range(300))
def test_random_clusters_match_reference(seed: int) -> None:
    _check(_random_cluster(random.Random(seed)))


def _single(name: str, net: str) -> dict[str, Any]:
    return {"name": name, "devices": [{"type": "T4"}], "network": {"type": net}}


def test_overridden_node_pairs_leave_the_next_slowest_by_hand() -> None:
    # a (1GbE), b and c (10GbE), one device each. a's paths are the slowest (1GbE); both are
    # overridden with NVLink2 figures, so the slowest left is b <-> c at 10GbE, and the
    # fastest is a.0 <-> b.0, the first of the two NVLink2 overrides.
    data = {
        "name": "t",
        "nodes": [_single("a", "1GbE"), _single("b", "10GbE"), _single("c", "10GbE")],
        "pairs": [
            {"between": ["a.0", "b.0"], "link": {"type": "NVLink2"}},
            {"between": ["c.0", "a.0"], "link": {"type": "NVLink2"}},
        ],
    }
    s = _check(data)
    assert s.slowest_link == PairLink(
        a="b.0", b="c.0", kind="10GbE", bandwidth=1.25e9 * 0.94, latency_s=20e-6
    )
    assert s.fastest_link == PairLink(
        a="a.0", b="b.0", kind="NVLink2", bandwidth=45e9, latency_s=2e-6
    )


def test_equal_bandwidth_takes_the_earlier_nodes_kind() -> None:
    # The same figures as 10GbE under another kind: a path takes its first node's kind.
    custom = {"bandwidth_GBps": 1.25 * 0.94, "latency_us": 20}
    data = {
        "name": "t",
        "nodes": [
            {"name": "a", "devices": [{"type": "T4"}], "network": custom},
            {"name": "b", "devices": [{"type": "T4"}], "network": {"type": "10GbE"}},
        ],
    }
    s = _check(data)
    assert s.slowest_link is not None and s.slowest_link.kind == "custom"


TWO_NODES: dict[str, Any] = {
    "name": "t",
    "nodes": [
        {"name": "a", "devices": [{"type": "T4", "count": 2}], "link": {"type": "PCIe3x16"}},
        {"name": "b", "devices": [{"type": "T4"}]},
    ],
    "network": {"type": "10GbE"},
}


def test_cluster_without_a_network_link_is_an_error_like_before() -> None:
    c = cluster_from_data(TWO_NODES, "t")
    broken = Cluster(
        name=c.name, devices=c.devices, intra_links=c.intra_links, network={"a": c.network["a"]}
    )
    with pytest.raises(InputError, match="node 'b' has no network link"):
        _reference_extremes(broken)
    with pytest.raises(InputError, match="node 'b' has no network link"):
        summarize(broken)


def test_devices_out_of_node_order_are_taken_in_node_order() -> None:
    # Never so from a file: a node's devices apart in Cluster.devices. Totals and figures are
    # the reference's; the pair named is the first in node order.
    c = cluster_from_data(TWO_NODES, "t")
    a0, a1, b0 = c.devices
    mixed = dataclasses.replace(c, devices=(a0, b0, a1))
    s = summarize(mixed)
    assert s.num_devices == 3 and [n.name for n in s.nodes] == ["a", "b"]
    assert s.slowest_link is not None and (s.slowest_link.a, s.slowest_link.b) == ("a.0", "b.0")
    assert s.fastest_link is not None and (s.fastest_link.a, s.fastest_link.b) == ("a.0", "a.1")


def test_million_devices_in_one_node_is_quick() -> None:
    data = {
        "name": "big",
        "nodes": [
            {
                "name": "n",
                "devices": [{"type": "A100-80GB", "count": 1_000_000}],
                "link": {"type": "NVLink3"},
                "pairs": [{"between": [0, 1], "link": {"bandwidth_GBps": 1, "latency_us": 9}}],
            }
        ],
    }
    start = time.perf_counter()
    s = summarize_config(config_from_data(data, "t"), "t")
    assert time.perf_counter() - start < 1.0
    assert s.num_devices == 1_000_000 and s.device_counts == {"A100-80GB": 1_000_000}
    assert s.total_memory_bytes == 1_000_000 * 80 * GiB
    assert s.slowest_link is not None and (s.slowest_link.a, s.slowest_link.b) == ("n.0", "n.1")
    # (0, 1) is overridden: the first pair on the NVLink3 default is (0, 2).
    assert s.fastest_link is not None and (s.fastest_link.a, s.fastest_link.b) == ("n.0", "n.2")
    assert s.fastest_link.kind == "NVLink3" and s.fastest_link.bandwidth == 270e9


def test_many_nodes_by_hand() -> None:
    # 2,000 nodes of 8: A100 nodes on HDR, T4 nodes on 10GbE (from the second half on).
    nodes = [
        {
            "name": f"{kind}-{k}",
            "devices": [{"type": "A100-80GB" if kind == "a" else "T4", "count": 8}],
            "link": {"type": "NVLink3" if kind == "a" else "PCIe3x16"},
            "network": {"type": "HDR" if kind == "a" else "10GbE"},
        }
        for kind in ("a", "t")
        for k in range(1000)
    ]
    s = summarize_config(config_from_data({"name": "m", "nodes": nodes}, "t"), "t")
    assert s.num_devices == 16_000 and s.device_counts == {"A100-80GB": 8000, "T4": 8000}
    assert s.slowest_link == PairLink(
        a="a-0.0", b="t-0.0", kind="10GbE", bandwidth=1.25e9 * 0.94, latency_s=20e-6
    )
    assert s.fastest_link is not None and s.fastest_link.kind == "NVLink3"
    assert (s.fastest_link.a, s.fastest_link.b) == ("a-0.0", "a-0.1")


def test_more_than_max_devices_is_one_clear_error() -> None:
    data = {
        "name": "huge",
        "nodes": [
            {
                "name": "a",
                "devices": [{"type": "T4", "count": MAX_DEVICES}],
                "link": {"type": "shm"},
            },
            {"name": "b", "devices": [{"type": "T4"}]},
        ],
        "network": {"type": "10GbE"},
    }
    with pytest.raises(InputError) as info:
        summarize_config(config_from_data(data, "f.yaml"), "f.yaml")
    assert str(info.value) == (
        "f.yaml: nodes.1.devices: 1,000,000,001 devices up to node 'b'; expected at most "
        "1,000,000,000 in a cluster"
    )


BAD: list[tuple[str, dict[str, Any]]] = [
    ("no-link", {"nodes": [{"name": "a", "devices": [{"type": "T4", "count": 2}]}]}),
    (
        "pair-index",
        {
            "nodes": [
                {
                    "name": "a",
                    "devices": [{"type": "T4", "count": 2}],
                    "link": {"type": "shm"},
                    "pairs": [{"between": [0, 2], "link": {"type": "shm"}}],
                }
            ]
        },
    ),
    (
        "no-network",
        {
            "nodes": [
                {"name": "a", "devices": [{"type": "T4"}]},
                {"name": "b", "devices": [{"type": "T4"}]},
            ]
        },
    ),
    ("type", {"nodes": [{"name": "a", "devices": [{"type": "T5"}]}]}),
    (
        "custom-type",
        {"nodes": [{"name": "a", "devices": [{"type": "X1"}]}], "device_types": {"X1": {}}},
    ),
    (
        "pair-id",
        {
            "nodes": [
                {"name": "a", "devices": [{"type": "T4", "count": 2}], "link": {"type": "shm"}}
            ],
            "pairs": [{"between": ["a.0", "a.01"], "link": {"type": "shm"}}],
        },
    ),
    (
        "pair-id-digits",
        {
            "nodes": [
                {"name": "a", "devices": [{"type": "T4", "count": 2}], "link": {"type": "shm"}}
            ],
            "pairs": [{"between": ["a.0", "a." + "9" * 5000], "link": {"type": "shm"}}],
        },
    ),
    (
        "pair-same",
        {
            "nodes": [
                {"name": "a", "devices": [{"type": "T4", "count": 2}], "link": {"type": "shm"}}
            ],
            "pairs": [{"between": ["a.1", "a.1"], "link": {"type": "shm"}}],
        },
    ),
]


@pytest.mark.parametrize(("case", "data"), BAD, ids=[b[0] for b in BAD])
def test_bad_files_give_the_resolver_error(case: str, data: dict[str, Any]) -> None:
    data = {"name": case, **data}
    with pytest.raises(InputError) as expected:
        cluster_from_data(data, "f.yaml")
    with pytest.raises(InputError) as got:
        summarize_config(config_from_data(data, "f.yaml"), "f.yaml")
    assert str(got.value) == str(expected.value)


def test_unknown_id_in_a_huge_cluster_names_the_pattern_not_every_id() -> None:
    data = {
        "name": "t",
        "nodes": [
            {"name": "a", "devices": [{"type": "T4", "count": 500}], "link": {"type": "shm"}}
        ],
        "pairs": [{"between": ["a.0", "a.500"], "link": {"type": "shm"}}],
    }
    with pytest.raises(InputError) as info:
        summarize_config(config_from_data(data, "f.yaml"), "f.yaml")
    assert str(info.value) == (
        "f.yaml: pairs.0.between: unknown device id 'a.500'; expected two ids like 'a.0' "
        "(known: 500 ids <node>.<index>, index below the node's device count)"
    )
