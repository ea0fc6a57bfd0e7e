"""``plan`` and ``predict`` show intervals from the store's error history and ``plan`` marks
the ties with the best (issue 27, items 1-2); ``train`` adds its run to the history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetplan.cli.main import main
from hetplan.predict.error_bars import HISTORY_FILE, ErrorRecord, append_record, load_history

ROOT = Path(__file__).resolve().parents[2]
HETERO = str(ROOT / "examples" / "clusters" / "local-cpu-hetero.yaml")
RATIOS = (0.9, 0.95, 1.0, 1.0, 1.05, 1.1, 1.15, 1.2, 1.3)  # measured / predicted, 9 runs


def _history(store: Path) -> None:
    for r in RATIOS:  # a family no plan has: the (cpu, catalog) records decide
        append_record(store, ErrorRecord(source="catalog", kind="cpu", family="other",
                                         predicted_s=1.0, measured_s=r))  # fmt: skip


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(argv)
    said = capsys.readouterr()
    return int(done.value.code or 0), said.out, said.err


def _plan(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    store = tmp_path / "store"
    _history(store)
    argv = ["plan", "--model", "gpt-tiny", "--batch", "8", "--cluster", HETERO, "--analytical"]
    argv += ["--profiles", str(store), "--out", str(tmp_path / "plan.json"), *extra]
    code, out, err = _cli(argv, capsys)
    assert code == 0, err
    return code, out


def test_plan_json_gives_each_plan_the_interval_of_the_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out = _plan(tmp_path, capsys, "--json")
    data = json.loads(out)
    for cand in data["candidates"]:
        t = cand["prediction"]["iteration_time_s"]
        # Nine ratios: the 80% conformal interval is their extremes (k = ceil(10 x 0.9) = 9).
        assert cand["iteration_interval_s"] == pytest.approx([0.9 * t, 1.3 * t])
    best = data["candidates"][0]["prediction"]["iteration_time_s"]
    expected = [
        c["label"]
        for c in data["candidates"][1:]
        if 0.9 * c["prediction"]["iteration_time_s"] <= 1.3 * best
    ]
    assert data["ties_with_best"] == expected


def test_plan_marks_ties_and_says_how_to_measure_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out = _plan(tmp_path, capsys)
    assert "80% interval" in out and "9 measured runs: cpu, catalog" in out
    if "tie with #1" in out:  # the cluster's plans may all be far from the best
        assert "~ │" in out
        assert "measure them:\n  hetplan tune --model gpt-tiny" in out and "--top" in out
    else:
        assert "no other plan's interval reaches it" in out


@pytest.mark.slow  # a real 2-rank run
def test_train_checks_the_interval_and_adds_its_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({
        "model": {"name": "resnet-tiny", "dataset": "cifar10"}, "strategy": "dp",
        "global_batch": 4, "micro_batches": 1,
        "pipelines": [{"batch": 2, "stages": [{"layers": ["stem", "layer1_0", "layer2_0",
                       "pool", "head"], "devices": [d]}]} for d in ("local.0", "local.1")],
    }))  # fmt: skip
    argv = ["train", str(plan), "--cluster", HETERO, "--steps", "3", "--warmup", "1"]
    argv += ["--profiles", str(store), "--out", str(tmp_path / "m.json")]
    code, out, err = _cli(argv, capsys)
    assert code == 0, err
    assert "the prediction's 80% interval" in out
    assert "no history; default for" in out
    (rec,) = load_history(store)
    assert rec.family == "dp" and rec.kind == "cpu" and rec.origin == "train"
    measured = json.loads((tmp_path / "m.json").read_text())["measured_iteration_s"]
    assert rec.measured_s == pytest.approx(measured)
    assert (store / HISTORY_FILE).is_file()
