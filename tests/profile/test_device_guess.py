"""GPU names as torch reports them -> catalog types (names from NVIDIA's boards; the H100 SXM5
reports no form factor: ``NVIDIA H100 80GB HBM3``, seen on the H100 hetplan ran on)."""

from __future__ import annotations

import pytest

from hetplan.profile.model import guess_device_type

NAMES = {
    "NVIDIA H100 80GB HBM3": "H100-SXM",
    "NVIDIA H100 PCIe": "H100-PCIe",
    "NVIDIA A100-SXM4-40GB": "A100-40GB",
    "NVIDIA A100-SXM4-80GB": "A100-80GB",
    "NVIDIA A100 80GB PCIe": "A100-80GB",
    "Tesla V100-SXM2-16GB": "V100-16GB",
    "Tesla V100-PCIE-32GB": "V100-32GB",
    "Tesla T4": "T4",
    "NVIDIA L4": "L4",
    "NVIDIA GeForce RTX 3090": "RTX3090",
    "NVIDIA TITAN RTX": "TitanRTX",
    "NVIDIA GeForce RTX 2080 Ti": "RTX2080-Ti",
    "NVIDIA GH200 480GB": "GH200",
    "NVIDIA A10G": "A10G",
}


@pytest.mark.parametrize(("name", "want"), NAMES.items())
def test_known_boards(name: str, want: str) -> None:
    assert guess_device_type(name) == want


@pytest.mark.parametrize(
    "name", ["NVIDIA H100 NVL", "NVIDIA L40S", "Quadro RTX 8000", "NVIDIA GeForce RTX 2080"]
)
def test_boards_not_in_the_catalog_are_not_guessed(name: str) -> None:
    assert guess_device_type(name) is None  # an L40S is no L4, an H100 NVL no SXM board
