"""``hetplan models`` and ``hetplan inspect`` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from hetplan.cli import cmd_model
from hetplan.graph import build_graph


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()
    cmd_model.register(app)
    return app


def run(app: typer.Typer, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_models_json_lists_the_zoo(app: typer.Typer) -> None:
    code, out, _ = run(app, "models", "--json")
    assert code == 0
    rows = {row["name"]: row for row in json.loads(out)}
    assert rows["resnet50"]["params"] == 25_557_032
    assert rows["resnet50"]["dataset"] == "imagenet"
    assert rows["resnet50"]["input_shape"] == [3, 224, 224]
    assert rows["gpt2"]["params"] == 124_439_808 and rows["gpt2"]["input_dtype"] == "int64"
    assert {"gpt-tiny", "bert-base", "bert-tiny", "resnet-tiny", "gpt2-xl"} <= rows.keys()


def test_models_table(app: typer.Typer) -> None:
    code, out, _ = run(app, "models")
    assert code == 0 and "mobilenetv2" in out and "25.56M" in out


def test_inspect_json_scales_with_the_batch(app: typer.Typer) -> None:
    code, out, _ = run(
        app, "inspect", "resnet-tiny", "--dataset", "cifar10", "--batch", "4", "--json"
    )
    assert code == 0
    report = json.loads(out)
    g = build_graph("resnet-tiny", "cifar10")
    assert report["model"] == "resnet-tiny" and report["dataset"] == "cifar10"
    assert report["batch"] == 4 and report["total_params"] == 5266
    assert report["total_fwd_flops"] == pytest.approx(4 * g.total_fwd_flops)
    layers = report["layers"]
    assert [r["name"] for r in layers] == ["stem", "layer1_0", "layer2_0", "pool", "head"]
    assert layers[0]["cut_bytes"] == 4 * 8 * 32 * 32 * 4 and layers[-1]["cut_bytes"] == 0
    assert layers[0]["out_bytes"] == 4 * g.layers[0].out_bytes
    assert layers[0]["params"] == g.layers[0].params  # parameters do not scale
    for key in ("fwd_flops", "bwd_flops", "saved_bytes"):
        assert all(key in r for r in layers)


def test_inspect_depth_and_table(app: typer.Typer) -> None:
    code, out, _ = run(app, "inspect", "resnet-tiny", "--depth", "2")
    assert code == 0 and "layer1_0.conv1" in out and "total" in out


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("resnet5", "unknown model 'resnet5'"),
        ("nothere.py:fn", "nothere.py: file not found"),
        ("gpt:layers=x", "bad option 'layers=x'"),
    ],
)
def test_inspect_bad_model_exits_2_with_one_line(
    app: typer.Typer, model: str, message: str
) -> None:
    code, out, err = run(app, "inspect", model)
    assert code == 2 and out == ""
    assert err.startswith("hetplan: error: ") and message in err
    assert err.count("\n") == 1


def test_inspect_custom_file(app: typer.Typer, tmp_path: Path) -> None:
    path = tmp_path / "net.py"
    path.write_text("from torch import nn\ndef make():\n    return nn.Linear(3, 2), (3,)\n")
    code, out, _ = run(app, "inspect", f"{path}:make", "--json")
    assert code == 0 and json.loads(out)["total_params"] == 8
