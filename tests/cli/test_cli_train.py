"""``hetplan train`` end to end through the console entry point."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from hetplan.cli.main import main
from hetplan.run.worker import build_parser

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
    code, out, _ = _run(["train", plan, "--cluster", HETERO, "--print-commands"], capsys)
    assert code == 0
    lines = out.strip().splitlines()
    assert len(lines) == 2
    assert lines[1].startswith("torchrun --nnodes 2 --node-rank 1 --nproc-per-node 1")
    assert "-m hetplan.run.worker --plan" in lines[0]


def test_multi_node_plan_is_not_run_locally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(tmp_path, "gpipe", ["v100.0", "t4.0"])
    code, _, err = _run(["train", plan, "--cluster", HETERO], capsys)
    assert code == 2
    assert "spans 2 nodes" in err and "--print-commands" in err


def test_ps_is_not_executable_yet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = {
        "model": {"name": "resnet-tiny", "dataset": "cifar10"},
        "strategy": "ps",
        "global_batch": 4,
        "ps_devices": ["local.0"],
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
    assert code == 2
    assert "strategy ps is not executable yet (see docs/run.md)" in err


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
    extra += ["--seed", "3", "--lr", "0.05"]
    code, out, _ = _run(["train", plan, "--cluster", HETERO, "--print-commands", *extra], capsys)
    assert code == 0
    for line in out.strip().splitlines():
        worker = shlex.split(line)
        args = build_parser().parse_args(worker[worker.index("hetplan.run.worker") + 1 :])
        assert (args.data, args.checkpoint, args.checkpoint_every) == (data, ck, 5)
        assert (args.seed, args.lr, args.resume) == (3, 0.05, None)


def test_print_commands_check_the_training_options_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(tmp_path, "gpipe", ["v100.0", "t4.0"])
    argv = ["train", plan, "--cluster", HETERO, "--print-commands", "--resume", str(tmp_path)]
    code, out, err = _run(argv, capsys)
    assert code == 2 and out == ""
    assert "no checkpoint there" in err
