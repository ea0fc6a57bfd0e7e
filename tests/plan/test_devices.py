from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetplan.cluster.spec import Cluster, Device, DeviceType, Link
from hetplan.plan.devices import (
    group_balanced,
    groups_by_node,
    pipeline_orders,
    split_batch,
)


def dtype(name: str) -> DeviceType:
    return DeviceType(
        name=name,
        peak_flops={"fp32": 1e12},
        memory_bandwidth=1e11,
        memory_bytes=1e10,
        idle_power_w=10,
        max_power_w=100,
    )


def make_cluster(layout: list[tuple[str, str, int]]) -> Cluster:
    """layout: (node, type, count) per node."""
    devs = []
    for node, tname, count in layout:
        t = dtype(tname)
        devs += [Device(id=f"{node}.{i}", type=t, node=node, index=i) for i in range(count)]
    link = Link(kind="x", bandwidth=1e9, latency_s=1e-6)
    return Cluster(
        name="c",
        devices=tuple(devs),
        intra_links={n: link for n, _, _ in layout},
        network={n: link for n, _, _ in layout},
    )


def test_pipeline_orders_keep_nodes_contiguous() -> None:
    c = make_cluster([("a", "X", 2), ("b", "Y", 2)])
    speed = {"a.0": 1.0, "a.1": 1.0, "b.0": 3.0, "b.1": 3.0}
    orders = pipeline_orders(c, ["a.0", "a.1", "b.0", "b.1"], speed)
    assert orders[0] == ("b.0", "b.1", "a.0", "a.1")
    assert orders[1] == ("a.1", "a.0", "b.1", "b.0")


def test_group_balanced_hand_case() -> None:
    speed = {"f1": 4.0, "f2": 4.0, "s1": 1.0, "s2": 1.0}
    groups = group_balanced(list(speed), speed, 2)
    assert sorted(sorted(g) for g in groups) == [["f1", "s1"], ["f2", "s2"]]
    with pytest.raises(ValueError, match="cannot form"):
        group_balanced(list(speed), speed, 3)


@given(st.lists(st.floats(0.1, 10.0), min_size=2, max_size=12), st.integers(1, 4))
def test_group_balanced_partitions_devices(speeds: list[float], groups: int) -> None:
    n = len(speeds) - len(speeds) % groups
    if n == 0:
        return
    speed = {f"d{i}": s for i, s in enumerate(speeds[:n])}
    out = group_balanced(list(speed), speed, groups)
    assert Counter(d for g in out for d in g) == Counter(list(speed))
    assert {len(g) for g in out} == {n // groups}


def test_groups_by_node() -> None:
    c = make_cluster([("a", "X", 2), ("b", "Y", 1)])
    assert groups_by_node(c, ["a.0", "b.0", "a.1"]) == [["a.0", "a.1"], ["b.0"]]


def test_split_batch_proportional_and_exact() -> None:
    assert split_batch(12, [2.0, 1.0, 1.0]) == [6, 3, 3]
    assert sum(split_batch(10, [1.0, 1.0, 1.0])) == 10
    assert split_batch(3, [100.0, 1.0, 1.0]) == [1, 1, 1]
    with pytest.raises(ValueError):
        split_batch(2, [1.0, 1.0, 1.0])


@given(st.integers(1, 500), st.lists(st.floats(0.01, 100.0), min_size=1, max_size=16))
def test_split_batch_sums_and_floors(batch: int, weights: list[float]) -> None:
    if batch < len(weights):
        return
    shares = split_batch(batch, weights)
    assert sum(shares) == batch
    assert min(shares) >= 1
