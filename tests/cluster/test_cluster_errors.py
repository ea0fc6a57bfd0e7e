"""Every bad cluster file gives one InputError line naming the file and the field."""

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from hetplan.cluster import cluster_from_data, load_cluster
from hetplan.errors import InputError

GOOD: dict[str, Any] = {
    "name": "t",
    "nodes": [
        {"name": "a", "devices": [{"type": "V100-32GB", "count": 2}], "link": {"type": "NVLink2"}},
        {"name": "b", "devices": [{"type": "T4", "count": 2}], "link": {"type": "PCIe3x16"}},
    ],
    "network": {"type": "10GbE"},
}


def _set(data: dict[str, Any], path: str, value: Any) -> None:
    """Set (or delete, when value is ...) the item at dotted ``path``."""
    *parents, last = path.split(".")
    cur: Any = data
    for key in parents:
        cur = cur[int(key)] if isinstance(cur, list) else cur[key]
    if isinstance(cur, list):
        cur[int(last)] = value
    elif value is ...:
        del cur[last]
    else:
        cur[last] = value


CASES = [
    # (path, value, expected message after "bad.yaml: ")
    ("nodes.0.link", {"bandwidth_GBps": 0, "latency_us": 1},
     "nodes.0.link: bandwidth_GBps: expected a finite number > 0 (got 0.0)"),
    ("network", {"bandwidth_gbit": -10, "latency_us": 1},
     "network: bandwidth_gbit: expected a finite number > 0 (got -10.0)"),
    ("nodes.1.link", {"bandwidth_GBps": 5}, "nodes.1.link: latency_us: missing"),
    ("nodes.1.link", {"latency_us": 5}, "nodes.1.link: expected `type` (one of NVLink1"),
    ("nodes.0.link", {"bandwidth_GBps": 5, "bandwidth_gbit": 5, "latency_us": 1},
     "nodes.0.link: give one of bandwidth_GBps and bandwidth_gbit, not both"),
    ("nodes.0.link.latency_us", -1, "nodes.0.link: latency_us: expected a finite number >= 0"),
    ("nodes.1.devices.0.type", "X100",
     "nodes.1.devices.0.type: unknown device type 'X100'; known: V100-16GB"),
    ("nodes.0.link.type", "NVLink9", "nodes.0.link: type: unknown link type 'NVLink9'; known:"),
    ("network.type", "2GbE", "network: type: unknown link type '2GbE'"),
    ("nodes.0.devices", ..., "nodes.0.devices: missing required field"),
    ("name", ..., "name: missing required field"),
    ("nodes.1.devices.0.type", ..., "nodes.1.devices.0.type: missing required field"),
    ("nodes.0.lnk", {"type": "NVLink2"}, "nodes.0.lnk: unknown field"),
    ("nodes.0.link.bandwidth", 5, "nodes.0.link.bandwidth: unknown field"),
    ("nodes.1.name", "a", "nodes.1.name: duplicate node name 'a'"),
    ("nodes.0.devices.0.count", 0, "nodes.0.devices.0: count: expected an integer >= 1 (got 0)"),
    ("nodes.0.devices.0.count", "two", "nodes.0.devices.0.count: Input should be a valid integer"),
    ("nodes.0.devices.0.speed", 0, "nodes.0.devices.0: speed: expected a finite number > 0"),
    ("nodes.0.devices.0.cpus", [[0]], "nodes.0.devices.0: cpus: expected one list of cores per"),
    ("network", ..., "network: missing (cluster has 2 nodes and node 'a' sets no network"),
    ("nodes.0.link", ..., "nodes.0.link: missing (node 'a' has 2 devices; expected e.g."),
    ("nodes.0.pairs", [{"between": [0, 2], "link": {"type": "PCIe3x16"}}],
     "nodes.0.pairs.0.between: expected two different device indices in 0..1 (got [0, 2])"),
    ("pairs", [{"between": ["a.0", "c.0"], "link": {"type": "PCIe3x16"}}],
     "pairs.0.between: unknown device id 'c.0'"),
    ("device_types", {"Npu": {"peak_tflops": {"fp32": 1}, "memory_GiB": 1}},
     "device_types.Npu.memory_bandwidth_GBps: missing (custom type 'Npu' is not in the catalog"),
    ("device_types", {"T4": {"idle_power_w": 80}},
     "device_types.T4.idle_power_w: expected <= max_power_w (70 W), got 80 W"),
    ("device_types", {"T4": {"peak_tflops": {"fp8": 1}}},
     "device_types.T4: peak_tflops.fp8: unknown dtype"),
    ("device_types", {"T4": {"compute_efficiency": 1.5}},
     "device_types.T4: compute_efficiency: expected a fraction in (0, 1] (got 1.5)"),
    ("device_types", {"Mine": {"base": "Z9"}}, "device_types.Mine.base: unknown device type 'Z9'"),
    ("collective_overhead_us", -5, "collective_overhead_us: expected a finite number >= 0"),
    ("collective_step_latency_us", -1,
     "collective_step_latency_us: expected a finite number >= 0"),
    ("collective_step_bandwidth_GBps", 0,
     "collective_step_bandwidth_GBps: expected a finite number > 0"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "value", "expected"), CASES, ids=[c[2][:40] for c in CASES])
def test_bad_field_names_file_and_field(path: str, value: Any, expected: str) -> None:
    data = copy.deepcopy(GOOD)
    _set(data, path, value)
    with pytest.raises(InputError) as info:
        cluster_from_data(data, "bad.yaml")
    msg = str(info.value)
    assert msg.startswith("bad.yaml: " + expected), msg
    assert "\n" not in msg


def test_good_base_is_valid() -> None:
    assert len(cluster_from_data(copy.deepcopy(GOOD), "good.yaml").devices) == 4


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: t\nnodes:\n  - name: [unclosed\n")
    with pytest.raises(InputError, match=r"bad\.yaml:\d+: invalid YAML") as info:
        load_cluster(bad)
    assert "\n" not in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nope\.yaml: file not found"):
        load_cluster(tmp_path / "nope.yaml")


def test_empty_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n")
    with pytest.raises(InputError, match=r"empty\.yaml: empty file; expected a mapping"):
        load_cluster(empty)


def test_error_from_file_names_the_path(tmp_path: Path) -> None:
    data = copy.deepcopy(GOOD)
    data["nodes"][0]["devices"][0]["type"] = "Nope"
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match=r"c\.yaml: nodes\.0\.devices\.0\.type: unknown"):
        load_cluster(f)


@pytest.mark.parametrize("count", [100_001, 10**12])
def test_a_count_typo_is_refused_before_any_device_is_built(count: int) -> None:
    """Issue 28: ``count: 1000000000000`` filled memory for minutes before anything was said.
    The size is checked from the counts; the message names the file, the field and the limit."""
    data = copy.deepcopy(GOOD)
    _set(data, "nodes.1.devices.0.count", count)
    with pytest.raises(InputError) as err:
        cluster_from_data(data, "bad.yaml")
    assert str(err.value) == (
        f"bad.yaml: {count + 2:,} devices (the largest group: nodes.1.devices.0.count = "
        f"{count:,}); expected at most 100,000 to plan, predict or run (`hetplan cluster "
        "show` summarises larger files)"
    )


def test_the_largest_resolvable_cluster_resolves() -> None:
    data = copy.deepcopy(GOOD)
    _set(data, "nodes.1.devices.0.count", 100_000 - 2)
    assert len(cluster_from_data(data, "big.yaml").devices) == 100_000
