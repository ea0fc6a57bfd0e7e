"""Which micro-batches a plan recomputes (issue 26, item 1): the plan file carries it (old
plans keep meaning every micro-batch), ``predict`` builds and shows it, bad input is one line
naming the field and exits 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetplan.cli.main import main
from hetplan.errors import InputError
from hetplan.planspec import Plan
from hetplan.serde import from_data, to_data

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
HETERO = str(CLUSTERS / "hetero-2node.yaml")
EXCEPT_LAST = "recompute: except each iteration's last micro-batch (torchgpipe's default)"
BUILD = ["predict", "--model", "vgg11", "--dataset", "cifar10", "--cluster", HETERO,
         "--strategy", "gpipe", "--pp", "2", "--batch", "32", "--microbatches", "4"]  # fmt: skip


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    code = exc.value.code
    got = capsys.readouterr()
    return (code if isinstance(code, int) else 0 if code is None else 1), got.out, got.err


def _plan_data(**kw: object) -> dict[str, object]:
    data: dict[str, object] = {
        "model": {"name": "mlp"},
        "strategy": "gpipe",
        "global_batch": 8,
        "micro_batches": 4,
        "pipelines": [
            {"stages": [{"layers": ["a"], "devices": ["x"]}, {"layers": ["b"], "devices": ["y"]}],
             "batch": 8}
        ],
    }  # fmt: skip
    return data | kw


@pytest.mark.parametrize("old", [True, False])
def test_old_plans_keep_their_meaning(old: bool) -> None:
    plan = from_data(Plan, _plan_data(recompute=old), "plan.json")
    assert plan.recompute is old and plan.recompute_mode == "all"
    assert plan.recompute_text == ("every micro-batch" if old else "off")


def test_except_last_round_trips() -> None:
    plan = from_data(Plan, _plan_data(recompute=True, recompute_mode="except_last"), "p")
    data = to_data(plan)
    assert data["recompute"] is True and data["recompute_mode"] == "except_last"
    assert from_data(Plan, json.loads(json.dumps(data)), "p") == plan


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        (
            {"recompute": True, "recompute_mode": "last"},
            "recompute_mode: Input should be 'all' or 'except_last' (got 'last')",
        ),
        ({"recompute_mode": "except_last"}, "recompute_mode: 'except_last' needs recompute: true"),
    ],
)
def test_bad_recompute_mode_names_the_field(kw: dict[str, object], words: str) -> None:
    with pytest.raises(InputError) as err:
        from_data(Plan, _plan_data(**kw), "plan.json")
    assert str(err.value).startswith("plan.json: ") and words in str(err.value)


def test_predict_builds_and_shows_except_last(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.json"
    code, text, _ = _run([*BUILD, "--recompute-mode", "except_last", "--out", str(out)], capsys)
    assert code == 0 and EXCEPT_LAST in text
    data = json.loads(out.read_text())
    assert data["recompute"] is True and data["recompute_mode"] == "except_last"
    code, again, _ = _run(["predict", "--cluster", HETERO, "--plan", str(out)], capsys)
    assert code == 0 and EXCEPT_LAST in again
    code, plain, _ = _run(BUILD, capsys)
    assert code == 0 and "recompute:" not in plain
    code, every, _ = _run([*BUILD, "--recompute"], capsys)
    assert code == 0 and "recompute: every micro-batch" in every


def test_predict_bad_recompute_mode(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run([*BUILD, "--recompute-mode", "sometimes"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "recompute_mode" in err and "'all' or 'except_last'" in err and "sometimes" in err
