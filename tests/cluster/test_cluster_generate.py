from pathlib import Path

import pytest

from hetplan.cluster import (
    DEVICE_CATALOG,
    LINK_CATALOG,
    config_from_data,
    config_to_data,
    load_cluster,
    write_cluster_config,
)
from hetplan.cluster.generate import (
    DEFAULT_INTRA_LINK,
    INTRA_LINKS,
    MAX_NODES,
    generate_config,
    intra_link,
)
from hetplan.cluster.summary import MAX_DEVICES
from hetplan.errors import InputError

GiB = 2**30


def test_link_table_names_catalog_entries() -> None:
    assert set(INTRA_LINKS) <= set(DEVICE_CATALOG)
    assert set(INTRA_LINKS.values()) | {DEFAULT_INTRA_LINK} <= set(LINK_CATALOG)
    assert intra_link("JetsonTX2") == "PCIe4x16"  # not in the table: the fallback


def test_generated_file_resolves_with_hand_counted_devices(tmp_path: Path) -> None:
    config = generate_config([("A100-80GB", 3), ("t4", 2)], per_node=4, network="10gbe")
    path = tmp_path / "c.yaml"
    write_cluster_config(path, config)
    cluster = load_cluster(path)
    # 3 A100 nodes + 2 T4 nodes, 4 devices each: 5 nodes, 20 devices.
    assert cluster.name == "generated-20"
    assert cluster.nodes == ("a100-80gb-0", "a100-80gb-1", "a100-80gb-2", "t4-0", "t4-1")
    assert len(cluster.devices) == 20
    assert [d.type.name for d in cluster.devices] == ["A100-80GB"] * 12 + ["T4"] * 8
    assert cluster.devices[4].id == "a100-80gb-1.0"
    assert {n: link.kind for n, link in cluster.intra_links.items()} == {
        "a100-80gb-0": "NVLink3",
        "a100-80gb-1": "NVLink3",
        "a100-80gb-2": "NVLink3",
        "t4-0": "PCIe3x16",
        "t4-1": "PCIe3x16",
    }
    assert {link.kind for link in cluster.network.values()} == {"10GbE"}
    assert sum(d.type.memory_bytes for d in cluster.devices) == (12 * 80 + 8 * 16) * GiB


def test_round_trips_through_plain_data() -> None:
    config = generate_config([("V100-32GB", 2), ("cpu", 1)], per_node=2, name="mixed")
    assert config_from_data(config_to_data(config), "t") == config
    assert [n.link.type if n.link else None for n in config.nodes] == ["NVLink2"] * 2 + ["shm"]


def test_one_device_per_node_needs_no_intra_link() -> None:
    config = generate_config([("T4", 2)], per_node=1)
    assert [n.link for n in config.nodes] == [None, None]
    assert config.network is not None and config.network.type == "100GbE"


T4 = [("T4", 1)]


@pytest.mark.parametrize(
    ("node_types", "per_node", "network", "message"),
    [
        ([], 8, "100GbE", "--nodes: expected at least one TYPE:COUNT (e.g. A100-80GB:4)"),
        ([("X100", 2)], 8, "100GbE", "--nodes: unknown device type 'X100'; known: V100-16GB"),
        ([("T4", 0)], 8, "100GbE", "--nodes: T4:0: expected a node count >= 1"),
        ([("T4", 1), ("t4", 2)], 8, "100GbE", "--nodes: T4 appears twice"),
        (T4, 0, "100GbE", "--per-node: expected an integer >= 1 (got 0)"),
        (T4, 8, "7GbE", "--network: unknown link type '7GbE'; known: NVLink1"),
        ([("T4", MAX_NODES + 1)], 1, "100GbE", "--nodes: 100,001 nodes; expected at most"),
        (
            [("T4", 2)],
            MAX_DEVICES // 2 + 1,
            "100GbE",
            "--per-node: 2 nodes x 500,000,001 = 1,000,000,002 devices; expected at most "
            "1,000,000,000",
        ),
    ],
)
def test_bad_input_names_the_option(
    node_types: list[tuple[str, int]], per_node: int, network: str, message: str
) -> None:
    with pytest.raises(InputError) as info:
        generate_config(node_types, per_node=per_node, network=network)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)
