"""``hetplan devices`` and ``hetplan cluster show`` end to end."""

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from hetplan.cli.cmd_cluster import register
from hetplan.cluster import DEVICE_CATALOG, load_cluster, summarize
from hetplan.serde import to_data

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


def _main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from hetplan.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    code = info.value.code
    out = capsys.readouterr()
    return (code if isinstance(code, int) else 0), out.out, out.err


def test_generate_writes_a_file_that_resolves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "new" / "dc.yaml"
    argv = ["cluster", "generate", "--nodes", "A100-80GB:3, T4:2", "--per-node", "4",
            "--network", "HDR", "--name", "dc", "--out", str(out)]  # fmt: skip
    code, stdout, _ = _main(argv, capsys)
    assert code == 0
    assert stdout == f"wrote {out}: cluster 'dc', 5 nodes, 20 devices\n"
    cluster = load_cluster(out)
    # By hand: 3 + 2 nodes of 4 devices.
    assert cluster.name == "dc" and len(cluster.nodes) == 5 and len(cluster.devices) == 20
    assert Counter(d.type.name for d in cluster.devices) == {"A100-80GB": 12, "T4": 8}
    assert {link.kind for link in cluster.network.values()} == {"HDR"}
    code, stdout, _ = _main(["cluster", "show", str(out), "--json"], capsys)
    assert code == 0
    assert to_data(summarize(cluster)) == json.loads(stdout)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--nodes", "T5:2"], "--nodes: unknown device type 'T5'; known: V100-16GB,"),
        (["--nodes", "T4"], "--nodes: 'T4'; expected TYPE:COUNT pairs like A100-80GB:32,T4:16"),
        (["--nodes", "T4:-1"], "--nodes: 'T4:-1'; expected TYPE:COUNT pairs"),
        (["--nodes", "T4:0"], "--nodes: T4:0: expected a node count >= 1"),
        (["--nodes", "T4:1,t4:2"], "--nodes: T4 appears twice; give each type once"),
        (["--nodes", "T4:2", "--per-node", "0"], "--per-node: expected an integer >= 1 (got 0)"),
        (["--nodes", "T4:2", "--network", "5GbE"], "--network: unknown link type '5GbE'"),
        (["--nodes", "T4:2", "--name", " "], "--name: expected a non-empty name"),
        (["--nodes", "T4:2", "--out", "c.json"], "expected a .yaml or .yml file"),
    ],
)
def test_generate_bad_input_exits_2_with_one_line_and_writes_nothing(
    args: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every --out is under tmp_path/sub, which must not appear.
    args = [str(tmp_path / "sub" / a) if a.endswith(".json") else a for a in args]
    out = ["--out", str(tmp_path / "sub" / "c.yaml")] if "--out" not in args else []
    code, _, err = _main(["cluster", "generate", *args, *out], capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("hetplan: error: ")
    assert expected in err
    assert list(tmp_path.iterdir()) == []


def test_generate_unwritable_out_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").mkdir()
    code, _, err = _main(
        ["cluster", "generate", "--nodes", "T4:2", "--out", str(tmp_path / "c.yaml")], capsys
    )
    assert code == 2
    assert (
        err == f"hetplan: error: --out {tmp_path / 'c.yaml'}: is a folder, expected a file path\n"
    )


def test_show_of_a_million_devices_is_quick(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(
        "name: big\nnodes:\n  - name: n\n    devices: [{type: A100-80GB, count: 1000000}]\n"
        "    link: {type: NVLink3}\n"
    )
    start = time.perf_counter()
    result = CliRunner().invoke(_app(), ["cluster", "show", str(path)], env={"COLUMNS": "160"})
    assert time.perf_counter() - start < 2.0
    assert result.exit_code == 0, result.output
    assert "Cluster big: 1000000 devices, 1 node" in result.output
    assert "slowest link: n.0 <-> n.1 NVLink3, 270 GB/s, 2.0 us" in result.output


LIGHT = """
import sys
from hetplan.cli.main import main
try:
    if sys.argv[1:]:
        main(sys.argv[1:])
except SystemExit as stop:
    assert stop.code in (0, None), stop.code
heavy = sorted(m for m in ("torch", "matplotlib", "numpy", "plotly") if m in sys.modules)
print("heavy:", ",".join(heavy) or "none")
"""


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--help"],
        ["--version"],
        ["devices"],
        ["models"],
        ["cluster", "show", str(EXAMPLES / "edge.yaml")],
        ["cluster", "generate"],
    ],
    ids=["import", "help", "version", "devices", "models", "show", "generate"],
)
def test_light_commands_do_not_import_torch(argv: list[str], tmp_path: Path) -> None:
    # A fresh interpreter: this test process has torch loaded already.
    if argv == ["cluster", "generate"]:
        argv = [*argv, "--nodes", "T4:2", "--out", str(tmp_path / "c.yaml")]
    env = {**os.environ, "HETPLAN_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("HETPLAN_NO_CACHE", None)
    run = [sys.executable, "-c", LIGHT, *argv]
    if argv == ["models"]:  # the first listing builds the zoo (torch) and caches it
        first = subprocess.run(run, capture_output=True, text=True, check=True, env=env)
        assert "heavy: none" not in first.stdout
    done = subprocess.run(run, capture_output=True, text=True, check=True, env=env)
    assert done.stdout.splitlines()[-1] == "heavy: none"


def _nodes_yaml(types: list[str]) -> str:
    nodes = "".join(f"  - {{name: n{k}, devices: [{{type: {t}}}]}}\n" for k, t in enumerate(types))
    return f"name: many\nnodes:\n{nodes}network: {{type: 10GbE}}\n"


def _table_rows(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("│")]


def test_show_merges_runs_of_same_nodes_beyond_64(tmp_path: Path) -> None:
    path = tmp_path / "runs.yaml"
    path.write_text(_nodes_yaml(["T4"] * 40 + ["L4"] * 30))
    result = CliRunner().invoke(_app(), ["cluster", "show", str(path)], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    rows = _table_rows(result.output)
    assert len(rows) == 2
    assert "n0 .. n39 (40 nodes)" in rows[0] and "1x T4" in rows[0]
    assert "n40 .. n69 (30 nodes)" in rows[1] and "1x L4" in rows[1]


def test_show_counts_the_rows_beyond_64(tmp_path: Path) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_text(_nodes_yaml(["T4", "L4"] * 50))  # 100 nodes, no two alike in a row
    result = CliRunner().invoke(_app(), ["cluster", "show", str(path)], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    rows = _table_rows(result.output)
    assert len(rows) == 64 and "n62 " in rows[62]
    assert "... 37 more nodes (--json lists all)" in rows[63]  # 100 - 63


def test_show_keeps_every_row_up_to_64(tmp_path: Path) -> None:
    path = tmp_path / "64.yaml"
    path.write_text(_nodes_yaml(["T4"] * 64))
    result = CliRunner().invoke(_app(), ["cluster", "show", str(path)], env={"COLUMNS": "160"})
    assert [row.split()[1] for row in _table_rows(result.output)] == [f"n{k}" for k in range(64)]
