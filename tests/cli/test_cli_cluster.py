"""``hetplan devices`` and ``hetplan cluster show`` end to end."""

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from hetplan.cli.cmd_cluster import register
from hetplan.cluster import DEVICE_CATALOG

EXAMPLES = Path(__file__).parents[2] / "examples" / "clusters"


def _app() -> typer.Typer:
    # A fresh app with only this module's commands, independent of the other cmd_* modules.
    app = typer.Typer()
    register(app)
    return app


def test_devices_table_lists_catalog() -> None:
    result = CliRunner().invoke(_app(), ["devices"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    for name in DEVICE_CATALOG:
        assert name in result.output
    assert "19.5" in result.output  # A100 fp32 TFLOP/s


def test_devices_json() -> None:
    result = CliRunner().invoke(_app(), ["devices", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [d["name"] for d in data] == list(DEVICE_CATALOG)
    a100 = next(d for d in data if d["name"] == "A100-40GB")
    assert a100["peak_flops"]["fp32"] == 19.5e12 and a100["max_power_w"] == 400


def test_cluster_show_table() -> None:
    path = EXAMPLES / "hetero-2node.yaml"
    result = CliRunner().invoke(_app(), ["cluster", "show", str(path)], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    out = result.output
    assert "4x V100-32GB" in out and "4x T4" in out
    assert "total peak compute: 95.2 TFLOP/s fp32, 760 TFLOP/s fp16" in out
    assert "slowest link: v100.0 <-> t4.0 10GbE, 1.175 GB/s, 20.0 us" in out
    assert "fastest link: v100.0 <-> v100.1 NVLink2, 45 GB/s, 2.0 us" in out


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_cluster_show_json_every_example(path: Path) -> None:
    result = CliRunner().invoke(_app(), ["cluster", "show", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["num_devices"] == sum(sum(n["devices"].values()) for n in data["nodes"])
    assert data["total_fp32_flops"] > 0


BAD_FILES = [
    ("zero-bw.yaml", "name: t\nnodes:\n  - name: a\n    devices: [{type: T4, count: 2}]\n"
     "    link: {bandwidth_GBps: 0, latency_us: 1}\n",
     "nodes.0.link: bandwidth_GBps: expected a finite number > 0"),
    ("type.yaml", "name: t\nnodes:\n  - name: a\n    devices: [{type: T5}]\n",
     "nodes.0.devices.0.type: unknown device type 'T5'"),
    ("link.yaml", "name: t\nnodes:\n  - name: a\n    devices: [{type: T4, count: 2}]\n"
     "    link: {type: PCIe9}\n", "nodes.0.link: type: unknown link type 'PCIe9'"),
    ("missing.yaml", "nodes:\n  - name: a\n    devices: [{type: T4}]\n",
     "name: missing required field"),
    ("dup.yaml", "name: t\nnodes:\n  - {name: a, devices: [{type: T4}]}\n"
     "  - {name: a, devices: [{type: T4}]}\nnetwork: {type: 1GbE}\n",
     "nodes.1.name: duplicate node name 'a'"),
    ("syntax.yaml", "name: t\nnodes: [\n", "invalid YAML"),
]  # fmt: skip


@pytest.mark.parametrize(("fname", "text", "expected"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_file_exits_2_with_one_line(
    fname: str, text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hetplan.cli.main import main  # the real entry point: error -> one line, exit 2

    path = tmp_path / fname
    path.write_text(text)
    with pytest.raises(SystemExit) as info:
        main(["cluster", "show", str(path)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"hetplan: error: {path}")
    assert expected in err


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hetplan.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(["cluster", "show", str(tmp_path / "none.yaml")])
    assert info.value.code == 2
    assert capsys.readouterr().err == f"hetplan: error: {tmp_path / 'none.yaml'}: file not found\n"
