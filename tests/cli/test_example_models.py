"""The custom-model example (``examples/models/residual_mlp.py``, docs/custom-models.md) through
the real entry point: inspect, plan, predict and train it; contract violations are one line."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from hetplan.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "models" / "residual_mlp.py"
MODEL = f"{EXAMPLE}:model"
CLUSTER = str(ROOT / "examples" / "clusters" / "local-cpu.yaml")

BAD = """
from torch import nn

def number():
    return 42

def needs_arguments(width):
    return nn.Linear(width, 2), (width,)

def bare():
    return nn.Linear(4, 2)

class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 2)

    def forward(self, x):
        return self.a(x), x

def pair():
    return Pair(), (4,)

def samples():
    return [1, 2, 3]
"""


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = _run([*argv, "--json"], capsys)
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def test_inspect_lists_the_layers_and_the_skip(capsys: pytest.CaptureFixture[str]) -> None:
    report = _json(["inspect", MODEL], capsys)
    layers = {r["name"]: r for r in report["layers"]}
    assert list(layers) == ["embed", "block1", "mix", "block2", "head"]
    assert report["input_shape"] == [16] and report["total_params"] == 3844
    # After `mix`, its output and the skip `e` (32 fp32 values each) cross the cut.
    assert layers["mix"]["cut_bytes"] == 2 * 32 * 4
    assert any("called again" in note and "mix" in note for note in report["notes"])


def _train(plan: Path, tmp: Path, capsys: pytest.CaptureFixture[str]) -> list[float]:
    argv = ["train", str(plan), "--cluster", CLUSTER, "--data", f"{EXAMPLE}:dataset"]
    argv += ["--steps", "4", "--warmup", "0", "--out", str(tmp / f"{plan.stem}-m.json")]
    data = _json(argv, capsys)
    losses: list[float] = data["losses"]
    assert len(losses) == 4 and all(math.isfinite(x) and x > 0 for x in losses)
    return losses


@pytest.mark.slow  # two real runs (1 and 2 ranks) on gloo: about 15 s on 2 cores
def test_plan_predict_and_train_the_example(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.json"
    ranking = _json(["plan", "--model", MODEL, "--cluster", CLUSTER, "--batch", "32",
                     "--out", str(plan)], capsys)  # fmt: skip
    assert ranking["plan_file"] == str(plan)
    assert _json(["predict", "--plan", str(plan), "--cluster", CLUSTER], capsys)["feasible"]
    planned = _train(plan, tmp_path, capsys)
    assert planned[-1] < planned[0]

    # The same model cut into two stages after `mix`: the skip `e` crosses the cut and the
    # second stage calls `mix` again (its weights are held, and trained, by both stages).
    data = json.loads(plan.read_text())
    stages = [(["embed", "block1", "mix"], "local.0"), (["block2", "head"], "local.1")]
    data |= {"strategy": "gpipe", "micro_batches": 2}
    data["pipelines"] = [
        {"batch": 32, "stages": [{"layers": names, "devices": [d]} for names, d in stages]}
    ]
    two = tmp_path / "two-stage.json"
    two.write_text(json.dumps(data))
    assert _json(["predict", "--plan", str(two), "--cluster", CLUSTER], capsys)["feasible"]
    # Same weights (seed 0), same samples, same model: the same losses as the planned run.
    assert _train(two, tmp_path, capsys) == pytest.approx(planned, rel=1e-5)


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("inspect bad.py:number", "bad.py:number: returned an int; expected an nn.Module"),
        ("inspect bad.py:needs_arguments", "bad.py:needs_arguments: the function raised TypeError"),
        ("inspect bad.py:bare", "bad.py:bare: returned a bare module; give --dataset"),
        ("inspect bad.py:pair", "bad.py:pair: forward returned a tuple of 2"),
        ("inspect bad.py:nothere", "bad.py: no function 'nothere'"),
        ("train PLAN --data bad.py:samples", "bad.py:samples: returned a list; expected a torch"),
    ],
)
def test_contract_violations_are_one_line(
    command: str,
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(BAD)
    plan = tmp_path / "plan.json"
    if command.startswith("train"):
        argv = ["plan", "--model", MODEL, "--cluster", CLUSTER, "--batch", "8", "--out", str(plan)]
        assert _run(argv, capsys)[0] == 0
    # Absolute paths: a file is imported once per process, by its name (tests share one).
    words = command.replace("PLAN", str(plan)).replace("bad.py", str(bad)).split()
    if words[0] == "train":
        words += ["--cluster", CLUSTER, "--steps", "1"]
    code, _, err = _run(words, capsys)
    assert code == 2
    assert err.startswith("hetplan: error: ") and err.count("\n") == 1
    assert message in err
