"""``hetplan tune`` and ``hetplan train --data/--checkpoint/--resume`` from the command line
(real processes, gloo, CPU)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hetplan.cli.main import main
from hetplan.predict.error_bars import load_history
from hetplan.profile.store import profile_dir
from hetplan.run.setup.checkpoint import find_checkpoint, read_info

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "examples" / "clusters" / "local-cpu-hetero.yaml"
EXAMPLE = ROOT / "examples" / "data" / "blobs.py"


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


def test_tune_picks_the_measured_best_and_trains_exactly_the_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = 24
    before = len(load_history(profile_dir()))
    data = _json(
        [
            "tune", "--model", f"{EXAMPLE}:model", "--cluster", str(CLUSTER),
            "--data", f"{EXAMPLE}:dataset", "--steps", str(steps), "--top", "2",
            "--checkpoint", str(tmp_path / "ck"), "--out", str(tmp_path / "tune.json"),
        ],
        capsys,
    )  # fmt: skip
    trials = data["trials"]
    assert len(trials) == 2
    measured = [t["measured_iteration_s"] for t in trials]  # objective: time
    assert data["chosen"] == measured.index(min(measured))
    final = data["final"]
    assert sum(t["steps"] for t in trials) + (final["steps"] if final else 0) == steps
    assert data["total_steps"] == steps
    info = read_info(find_checkpoint(tmp_path / "ck" / ("final" if final else "trial-1")))
    assert info.step == steps  # the trained state has seen every step
    assert info.position == steps * 64  # default --batch 64: every sample once in order
    for t in trials:
        assert t["energy_source"].startswith(("measured", "modelled"))
        assert t["measured_energy_j_per_iteration"] > 0
    assert json.loads((tmp_path / "tune.json").read_text())["chosen"] == data["chosen"]
    # every trial and the final run added to the store's error history (issue 27, item 1)
    added = load_history(profile_dir())[before:]
    runs = [*measured, *([final["measured_iteration_s"]] if final else [])]
    assert [r.origin for r in added] == ["tune"] * len(runs)
    assert [r.measured_s for r in added] == pytest.approx(runs)


def test_train_with_data_checkpoint_and_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.json"
    code, _, err = _run(
        ["plan", "--model", f"{EXAMPLE}:model", "--cluster", str(CLUSTER), "--batch", "32",
         "--out", str(plan), "--json"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    common = ["train", str(plan), "--cluster", str(CLUSTER), "--data", f"{EXAMPLE}:dataset"]
    out = tmp_path / "m.json"
    first = _json(
        [*common, "--steps", "2", "--warmup", "1", "--checkpoint", str(tmp_path / "ck"),
         "--out", str(out)],
        capsys,
    )  # fmt: skip
    assert first["checkpoint"].endswith("step-00000003")
    lines = Path(first["step_log"]).read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [0, 1, 2]
    assert [json.loads(x)["timed"] for x in lines] == [False, True, True]
    second = _json(
        [*common, "--steps", "2", "--warmup", "0", "--resume", str(tmp_path / "ck"),
         "--out", str(tmp_path / "m2.json")],
        capsys,
    )  # fmt: skip
    assert second["first_step"] == 3
    assert len(second["losses"]) == 2


def test_bad_training_inputs_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.json"
    _run(
        ["plan", "--model", f"{EXAMPLE}:model", "--cluster", str(CLUSTER), "--out", str(plan)],
        capsys,
    )
    base = ["train", str(plan), "--cluster", str(CLUSTER), "--steps", "1", "--warmup", "0"]
    cases = [
        (["--data", f"{EXAMPLE}:nope"], "no function 'nope'"),
        (["--resume", str(tmp_path)], "no checkpoint there"),
        (["--checkpoint-every", "-1"], "--checkpoint-every"),
        (["--data", f"{EXAMPLE}:model"], "expected a torch.utils.data.Dataset"),
    ]
    for extra, words in cases:
        code, _, err = _run([*base, *extra], capsys)
        assert code == 2, (extra, err)
        assert words in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1


def test_profile_power_without_a_counter_says_why(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from hetplan.run.meters import power_profile

    monkeypatch.setattr(power_profile, "meter_for", lambda device: (None, "no RAPL here"))
    code, _, err = _run(["profile-power", "--type", "cpu", "--seconds", "1"], capsys)
    assert code == 2
    assert err.strip() == (
        "hetplan: error: cpu: no energy counter (no RAPL here); the power model keeps the "
        "catalog's idle and max watts"
    )


def test_profile_power_on_a_cpu_needs_its_type(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["profile-power", "--seconds", "1"], capsys)
    assert code == 2
    assert "--type" in err and len(err.strip().splitlines()) == 1
