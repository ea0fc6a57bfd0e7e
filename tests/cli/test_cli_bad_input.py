"""Bad input found by review: each exits 2 with one line and writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetplan.cli.main import main

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
HETERO = str(CLUSTERS / "hetero-2node.yaml")


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    code = exc.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--model", "vgg11", "--dataset", "cifar10", "--cluster", HETERO,
              "--batch", "32", "--strategies", "dp", "--out", str(out), "--json"])  # fmt: skip
    assert exc.value.code in (0, None)
    return out


def test_plan_out_unwritable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path
    code, err = _run(
        [
            "plan",
            "--model",
            "vgg11",
            "--dataset",
            "cifar10",
            "--cluster",
            HETERO,
            "--batch",
            "32",
            "--strategies",
            "dp",
            "--out",
            str(target),
        ],
        capsys,
    )
    assert code == 2
    assert err.count("\n") == 1 and "is a folder, expected a file path" in err
    assert f"--out {target}" in err
    assert not list(tmp_path.rglob("*.tmp"))


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--batch", "-4"), ("--strategy", "dp"), ("--tp", "2"), ("--recompute", None)],
)
def test_predict_plan_with_plan_building_flag(
    flag: str, value: str | None, plan_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["predict", "--cluster", HETERO, "--plan", str(plan_file), flag]
    code, err = _run(argv + ([value] if value is not None else []), capsys)
    assert code == 2
    assert err.count("\n") == 1 and f"{flag} cannot be combined with --plan" in err


def test_predict_negative_dataset_size(plan_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predict", "--cluster", HETERO, "--plan", str(plan_file), "--dataset-size", "-1"]
    code, err = _run(argv, capsys)
    assert code == 2 and "dataset size must be >= 1" in err
