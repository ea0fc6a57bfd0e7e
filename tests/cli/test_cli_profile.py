"""``hetplan profile`` end to end on tiny models."""

import json
from pathlib import Path

import pytest
import torch
import typer
from typer.testing import CliRunner

from hetplan.cli.cmd_profile import register
from hetplan.cluster.catalog import device_type
from hetplan.cluster.config import load_cluster
from hetplan.cluster.spec import Device
from hetplan.graph.extract import build_graph
from hetplan.profile.measured import MeasuredCompute
from hetplan.profile.store import PROFILE_DIR_ENV, find_profile, load_profile

TINY = """
from torch import nn

def tiny():
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(inplace=True), nn.Linear(16, 3)), (6,)
"""


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def group() -> None:  # keep subcommand names even when only one is registered
        """Test app."""

    register(app)
    return app


def invoke(args: list[str], tmp_path: Path):
    env = {"COLUMNS": "200", PROFILE_DIR_ENV: str(tmp_path / "store")}
    return CliRunner().invoke(_app(), args, env=env)


@pytest.fixture
def tiny(tmp_path: Path) -> str:
    path = tmp_path / "tiny.py"
    path.write_text(TINY)
    return f"{path}:tiny"


def test_profile_json_stores_a_profile_with_the_graph_layers(tmp_path: Path, tiny: str) -> None:
    threads = torch.get_num_threads()
    result = invoke(
        ["profile", tiny, "--batches", "1,4", "--warmup", "1", "--steps", "2", "--json"], tmp_path
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    path = Path(data["path"])
    assert path.parent == tmp_path / "store"
    profile = load_profile(path)
    assert [f.name for f in profile.fits] == [x.name for x in build_graph(tiny).layers]
    assert profile.layer_names == ("0", "1", "2")
    assert profile.batch_sizes == (1, 4)
    assert profile.threads == 1  # CPU default: one core, the catalog's ``cpu`` type
    assert torch.get_num_threads() == threads  # restored afterwards
    assert profile.device_type == "cpu"
    assert any("in-place" in note for note in profile.notes)
    found = find_profile("cpu", tiny, (6,), "fp32", directory=tmp_path / "store")
    assert found == profile
    assert data["profile"]["fits"][0]["name"] == "0"
    # the stored profile prices the same graph in the cost model, loss billed to the last layer
    cpu = Device(id="n.0", type=device_type("cpu"), node="n", index=0, speed=0.5)
    costs = MeasuredCompute([found]).layer_costs(build_graph(tiny), cpu, 3)
    assert {c.source for c in costs} == {"measured on cpu"}
    assert costs[0].fwd_s == pytest.approx(found.fits[0].fwd.at(3) / 0.5)
    loss_bwd = found.step_fit.loss.bwd.at(3)
    assert costs[2].bwd_s == pytest.approx((found.fits[2].bwd.at(3) + loss_bwd) / 0.5)


def test_profile_table_and_out_file(tmp_path: Path, tiny: str) -> None:
    out = tmp_path / "p.json"
    result = invoke(
        ["profile", tiny, "--batch", "4", "--warmup", "0", "--steps", "1", "--type", "mycpu",
         "--threads", "1", "--optimizer", "adam", "--out", str(out)],
        tmp_path,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    for text in ("whole step", "sum of layers", "other", f"profile stored in {out}"):
        assert text in result.output
    profile = load_profile(out)
    assert profile.device_type == "mycpu"
    assert profile.optimizer == "adam"
    assert profile.batch_sizes == (1, 2, 4)  # default set: 1, B/2, B
    assert len(profile.batches) == 3


def test_zoo_model_runs(tmp_path: Path) -> None:
    result = invoke(
        ["profile", "resnet-tiny", "--batches", "2", "--warmup", "0", "--steps", "1", "--json"],
        tmp_path,
    )
    assert result.exit_code == 0, result.output
    profile = load_profile(Path(json.loads(result.output)["path"]))
    assert profile.input_shape == (3, 32, 32)
    assert profile.dataset == "cifar10"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["profile", "no-such-model"], "unknown model"),
        (["profile", "resnet-tiny", "--batches", "1,x"], "--batches"),
        (["profile", "resnet-tiny", "--dtype", "fp64"], "fp64"),
        (["profile", "resnet-tiny", "--device", "tpu"], "--device"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    result = invoke(args, tmp_path)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_cuda_without_cuda_is_an_input_error(tmp_path: Path) -> None:
    result = invoke(["profile", "resnet-tiny", "--device", "cuda:0"], tmp_path)
    assert result.exit_code == 2
    assert "CUDA is not available" in result.output


@pytest.mark.slow  # starts 2 processes
def test_profile_links_writes_a_cluster_the_planner_reads(tmp_path: Path) -> None:
    src = tmp_path / "two.yaml"
    src.write_text(
        "name: two\nnodes:\n  - name: l\n    devices: [{type: cpu, count: 2}]\n"
        "    link: {type: shm}\n"
    )
    out = tmp_path / "measured.yaml"
    args = ["profile-links", "--cluster", str(src), "--out", str(out), "--sizes", "256,4K"]
    result = invoke([*args, "--warmup", "0", "--iters", "2", "--stat", "p10", "--json"], tmp_path)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["report"]["statistic"] == "p10"
    assert data["report"]["pairs"][0]["sizes"] == [256, 4096]
    cluster = load_cluster(out)
    link = cluster.link("l.0", "l.1")
    assert link.kind != "shm"  # the measured pair override replaced the catalog link
    assert link.bandwidth == pytest.approx(data["report"]["pairs"][0]["bandwidth"], rel=1e-5)
    overhead = data["report"]["allreduce"]["overhead_s"]
    assert cluster.collective_overhead_s == pytest.approx(overhead, rel=1e-5, abs=1e-12)


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--sizes", "1Q"], "--sizes"), (["--stat", "mean"], "--stat")],
)
def test_profile_links_bad_options(tmp_path: Path, extra: list[str], message: str) -> None:
    src = tmp_path / "c.yaml"
    src.write_text(
        "name: c\nnodes: [{name: a, devices: [{type: cpu, count: 2}], link: {type: shm}}]\n"
    )
    result = invoke(["profile-links", "--cluster", str(src), "--out", str(src), *extra], tmp_path)
    assert result.exit_code == 2
    assert message in result.output
