from pathlib import Path

import pytest

from hetplan.cluster import cluster_from_data, load_cluster, summarize

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
