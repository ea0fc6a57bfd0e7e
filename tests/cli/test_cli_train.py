"""``hetplan train`` end to end through the console entry point."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from hetplan.cli.main import main

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
LOCAL = str(CLUSTERS / "local-cpu-hetero.yaml")
HETERO = str(CLUSTERS / "hetero-2node.yaml")


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def _plan(tmp_path: Path, strategy: str, devices: list[str], **extra: Any) -> str:
    stages = [["stem", "layer1_0"], ["layer2_0", "pool", "head"]]
    data = {
        "model": {"name": "resnet-tiny", "dataset": "cifar10"},
        "strategy": strategy,
        "global_batch": 4,
        "micro_batches": 2,
        "pipelines": [
            {
                "batch": 4,
                "stages": [
                    {"layers": s, "devices": [d]} for s, d in zip(stages, devices, strict=True)
                ],
            }
        ],
        **extra,
    }
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.slow  # one real 2-rank run plus the prediction: about 10-20 s on 2 busy cores
def test_train_json_measures_and_compares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(tmp_path, "gpipe", ["local.0", "local.1"])
    out_file = tmp_path / "m.json"
    argv = ["train", plan, "--cluster", LOCAL, "--steps", "2", "--warmup", "1"]
    code, out, err = _run([*argv, "--json", "--out", str(out_file)], capsys)
    assert code == 0, err
    data = json.loads(out)
    measured, predicted = data["measured_iteration_s"], data["predicted_iteration_s"]
    assert measured > 0 and predicted > 0
    assert data["relative_error"] == pytest.approx((measured - predicted) / predicted)
    assert [(r["rank"], r["device"], r["stage"]) for r in data["ranks"]] == [
        (0, "local.0", 0),
        (1, "local.1", 1),
    ]
    saved = json.loads(out_file.read_text())
    assert saved["measured_iteration_s"] == measured
    assert saved["plan"]["strategy"] == "gpipe"
    assert len(saved["iteration_s"]) == 2 and len(saved["loss"]) == 3


def test_print_commands_one_per_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = _plan(tmp_path, "gpipe", ["v100.0", "t4.0"])
    # hetero-2node.yaml gives no `address:` and "v100" does not resolve: a printed command
    # would not work, so the default rendezvous is refused (issue 28); --rdzv gives one.
    code, out, err = _run(["train", plan, "--cluster", HETERO, "--print-commands"], capsys)
    assert code == 2 and out == "" and "add `address: HOST_OR_IP` to node v100" in err
    argv = ["train", plan, "--cluster", HETERO, "--print-commands", "--rdzv", "v100:29400"]
    code, out, _ = _run(argv, capsys)
    assert code == 0
    lines = [shlex.split(x) for x in out.strip().splitlines()]
    assert [x[x.index("--node") + 1] for x in lines] == ["v100", "t4"]
    assert all(x[:3] == ["hetplan", "train", plan] for x in lines)
    assert all(x[x.index("--rdzv") + 1] == "v100:29400" for x in lines)


def test_multi_node_plan_is_not_run_locally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(tmp_path, "gpipe", ["v100.0", "t4.0"])
    code, _, err = _run(["train", plan, "--cluster", HETERO], capsys)
    assert code == 2
    assert "spans 2 nodes" in err and "--print-commands" in err
    code, _, err = _run(["train", plan, "--cluster", HETERO, "--node", "v100"], capsys)
    assert code == 2 and "--node and --rdzv go together" in err


def test_unknown_ps_server_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A server device the cluster lacks is one line naming it, before any process starts
    (a known device that is no worker runs a server-only rank: tests/run/test_run_ps.py)."""
    data = {
        "model": {"name": "resnet-tiny", "dataset": "cifar10"},
        "strategy": "ps",
        "global_batch": 4,
        "ps_devices": ["local.9"],
        "pipelines": [
            {
                "batch": 4,
                "stages": [
                    {
                        "layers": ["stem", "layer1_0", "layer2_0", "pool", "head"],
                        "devices": ["local.1"],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "ps.json"
    path.write_text(json.dumps(data))
    code, _, err = _run(["train", str(path), "--cluster", LOCAL], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "local.9" in err


def test_non_positive_timeout_is_refused_before_launch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(tmp_path, "gpipe", ["local.0", "local.1"])
    code, _, err = _run(["train", plan, "--cluster", LOCAL, "--timeout", "-1"], capsys)
    assert code == 2
    assert err.count("\n") == 1 and "--timeout must be > 0" in err


def test_print_commands_carry_the_training_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(tmp_path, "gpipe", ["v100.0", "t4.0"])
    data = f"{Path(__file__).resolve().parents[2]}/examples/data/blobs.py:dataset"
    ck = str(tmp_path / "ck")
    extra = ["--data", data, "--checkpoint", ck, "--checkpoint-every", "5"]
    extra += ["--seed", "3", "--lr", "0.05", "--steps", "7", "--rdzv", "head:1234"]
    extra += ["--run-id", "job-42"]
    code, out, _ = _run(["train", plan, "--cluster", HETERO, "--print-commands", *extra], capsys)
    assert code == 0
    for line in out.strip().splitlines():
        words = shlex.split(line)
        for flag, value in zip(extra[::2], extra[1::2], strict=True):
            assert words[words.index(flag) + 1] == value


def test_print_commands_check_the_training_options_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(tmp_path, "gpipe", ["v100.0", "t4.0"])
    argv = ["train", plan, "--cluster", HETERO, "--print-commands", "--resume", str(tmp_path)]
    code, out, err = _run(argv, capsys)
    assert code == 2 and out == ""
    assert "no checkpoint there" in err
