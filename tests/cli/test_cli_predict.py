"""``hetplan predict`` end to end through the console entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetplan.cli.main import main

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
HETERO = str(CLUSTERS / "hetero-2node.yaml")


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def test_json_has_the_promised_fields(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        [
            "predict",
            "--model",
            "vgg11",
            "--dataset",
            "cifar10",
            "--cluster",
            HETERO,
            "--strategy",
            "hybrid",
            "--dp",
            "2",
            "--batch",
            "64",
            "--json",
        ],
        capsys,
    )
    assert code == 0
    data = json.loads(out)
    for key in (
        "feasible",
        "infeasible_reasons",
        "iteration_time_s",
        "epoch_time_s",
        "samples_per_s",
        "energy_j_per_iteration",
        "edp",
        "devices",
        "cost_source",
    ):
        assert key in data
    assert data["feasible"] is True
    assert data["epoch_time_s"] == pytest.approx(782 * data["iteration_time_s"])  # CIFAR-10
    assert len(data["devices"]) == 8
    for dev in data["devices"]:
        assert {"id", "memory_bytes", "memory_capacity_bytes", "busy_fraction", "power_w"} <= set(
            dev
        )


def test_plan_file_round_trip_and_grid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = {
        "model": {"name": "vgg11", "dataset": "cifar10"},
        "strategy": "gpipe",
        "global_batch": 32,
        "micro_batches": 4,
        "pipelines": [
            {
                "batch": 32,
                "stages": [
                    {"layers": [f"features.{i}" for i in range(8)], "devices": ["v100.0"]},
                    {"layers": [], "devices": ["v100.1"]},
                ],
            }
        ],
    }
    # Fill the second stage with the remaining layers of the real graph.
    from hetplan.graph import build_graph

    names = [layer.name for layer in build_graph("vgg11", dataset="cifar10").layers]
    plan["pipelines"][0]["stages"][0]["layers"] = names[:5]  # type: ignore[index]
    plan["pipelines"][0]["stages"][1]["layers"] = names[5:]  # type: ignore[index]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    code, out, _ = _run(["predict", "--cluster", HETERO, "--plan", str(path), "--grid"], capsys)
    assert code == 0
    assert "gpipe: feasible" in out
    assert "v100.0 | F0" in out and "OPT" in out


def test_infeasible_prints_feasible_false_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        [
            "predict",
            "--model",
            "gpt2-xl",
            "--cluster",
            HETERO,
            "--strategy",
            "dp",
            "--devices",
            "t4.0",
            "--batch",
            "1",
            "--optimizer",
            "adam",
        ],
        capsys,
    )
    assert code == 0
    assert "feasible: false" in out
    assert "t4.0: out of memory: needs" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--strategy", "dp", "--devices", "zz.0"], "unknown device id 'zz.0'"),
        (["--strategy", "gpipe", "--partition", "0,x"], "--partition"),
        (["--strategy", "nope"], "--strategy"),
        (["--strategy", "dp", "--tp", "0"], "--tp: must be >= 1 (got 0)"),
        (["--strategy", "gpipe", "--pp", "99"], "needs 99 devices"),
        ([], "--plan"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(["predict", "--model", "vgg11", "--cluster", HETERO, *argv], capsys)
    assert code == 2
    assert message in err
    assert err.count("\n") == 1


def test_device_table_is_capped_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predict", "--cluster", str(CLUSTERS / "big-64.yaml"), "--model", "gpt-tiny",
            "--strategy", "dp", "--batch", "128"]  # fmt: skip
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    rows = [line for line in out.splitlines() if line.startswith("  ") and " worker " in line]
    assert len(rows) == 32  # of the cluster's 64 devices
    assert "... 32 more devices (--json lists all); fullest memory:" in out
    code, out, _ = _run([*argv, "--json"], capsys)
    assert len(json.loads(out)["devices"]) == 64


def test_out_writes_the_plan_it_built(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``predict --out`` then ``predict --plan`` of that file: the same prediction."""
    out = tmp_path / "built.json"
    argv = ["predict", "--cluster", HETERO, "--model", "gpt-tiny", "--strategy", "hybrid",
            "--dp", "2", "--pp", "2", "--batch", "16", "--json"]  # fmt: skip
    code, first, err = _run([*argv, "--out", str(out)], capsys)
    assert code == 0, err
    code, again, err = _run(["predict", "--cluster", HETERO, "--plan", str(out), "--json"], capsys)
    assert code == 0, err
    a, b = json.loads(first), json.loads(again)
    assert a["iteration_time_s"] == b["iteration_time_s"] and a["strategy"] == "hybrid"
    assert json.loads(out.read_text())["cluster"] == "hetero-2node"
