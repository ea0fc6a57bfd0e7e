import pytest

from hetplan.cluster.catalog import DEVICE_CATALOG, device_type
from hetplan.cluster.links import LINK_CATALOG, link_type
from hetplan.errors import InputError

REQUIRED_DEVICES = [
    "V100-16GB", "V100-32GB", "A100-40GB", "A100-80GB", "H100-SXM", "T4", "P100", "P40",
    "TitanRTX", "RTX3090", "RTX4090", "L4", "A10G", "GTX1050", "JetsonTX1", "JetsonTX2", "cpu",
]  # fmt: skip
REQUIRED_LINKS = [
    "NVLink1", "NVLink2", "NVLink3", "NVLink4", "PCIe3x16", "PCIe4x16", "PCIe5x16", "shm",
    "1GbE", "10GbE", "25GbE", "40GbE", "100GbE", "EDR", "HDR", "NDR",
]  # fmt: skip


def test_catalog_has_required_devices() -> None:
    assert set(REQUIRED_DEVICES) <= set(DEVICE_CATALOG)


@pytest.mark.parametrize("name", sorted(DEVICE_CATALOG))
def test_device_entry_is_sane(name: str) -> None:
    dt = DEVICE_CATALOG[name]
    assert dt.name == name
    assert "fp32" in dt.peak_flops
    assert set(dt.peak_flops) <= {"fp32", "tf32", "fp16", "bf16"}
    assert all(v > 0 for v in dt.peak_flops.values())
    assert dt.memory_bandwidth > 0 and dt.memory_bytes > 0
    assert 0 < dt.idle_power_w <= dt.max_power_w
    assert dt.price_per_hour is None or dt.price_per_hour > 0
    assert dt.source.strip()


def test_tf32_only_on_ampere_and_newer() -> None:
    with_tf32 = {n for n, dt in DEVICE_CATALOG.items() if "tf32" in dt.peak_flops}
    assert with_tf32 == {"A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIe", "GH200",
                         "RTX3090", "RTX4090", "L4", "A10G"}  # fmt: skip


def test_spot_figures_from_datasheets() -> None:
    a100 = DEVICE_CATALOG["A100-40GB"]
    assert a100.peak_flops == {"fp32": 19.5e12, "tf32": 156e12, "fp16": 312e12, "bf16": 312e12}
    assert a100.memory_bytes == 40 * 2**30
    assert a100.memory_bandwidth == 1555e9
    assert a100.max_power_w == 400
    v100 = DEVICE_CATALOG["V100-32GB"]
    assert v100.flops("bf16") == 15.7e12  # no bf16: falls back to fp32
    assert v100.idle_power_w == 55
    assert DEVICE_CATALOG["T4"].price_per_hour == 0.526
    assert DEVICE_CATALOG["P40"].peak_flops["fp16"] == pytest.approx(12e12 / 64)


def test_device_type_lookup_is_case_insensitive() -> None:
    assert device_type("a100-40gb") is DEVICE_CATALOG["A100-40GB"]
    assert device_type("CPU") is DEVICE_CATALOG["cpu"]


def test_unknown_device_type_lists_known_names() -> None:
    with pytest.raises(InputError, match=r"unknown device type 'X100'; known: V100-16GB, "):
        device_type("X100")


def test_catalog_has_required_links() -> None:
    assert set(REQUIRED_LINKS) <= set(LINK_CATALOG)


@pytest.mark.parametrize("name", sorted(LINK_CATALOG))
def test_link_entry_is_sane(name: str) -> None:
    lt = LINK_CATALOG[name]
    assert lt.name == name
    assert lt.line_rate > 0 and 0 < lt.efficiency <= 1 and lt.latency_s > 0
    assert lt.source.strip()
    link = lt.to_link()
    assert (link.kind, link.bandwidth, link.latency_s) == (name, lt.bandwidth, lt.latency_s)


def test_link_figures_by_hand() -> None:
    assert link_type("PCIe3x16").bandwidth == pytest.approx(15.75e9 * 0.8)
    assert link_type("10GbE").bandwidth == pytest.approx(1.25e9 * 0.94)
    assert link_type("NVLink2").bandwidth == pytest.approx(50e9 * 0.9)
    assert link_type("EDR").bandwidth == pytest.approx(12.5e9 * 0.95)
    # 1.175 GB over 10GbE: 1 s of payload plus 20 us latency.
    assert link_type("10gbe").to_link().transfer_s(1.175e9) == pytest.approx(1.0 + 20e-6)


def test_links_are_ordered_by_generation() -> None:
    bws = [link_type(n).bandwidth for n in ("NVLink1", "NVLink2", "NVLink3", "NVLink4")]
    assert bws == sorted(bws)
    eth = [link_type(f"{g}GbE").bandwidth for g in (1, 10, 25, 40, 100)]
    assert eth == sorted(eth)


def test_unknown_link_type() -> None:
    with pytest.raises(InputError, match=r"unknown link type 'NVLink9'; known: NVLink1, "):
        link_type("NVLink9")
