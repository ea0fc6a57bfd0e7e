"""What ``plan`` and ``predict`` print for a person to read (issue 28): durations in human
units, a table that fits 100 columns, the device limit named as the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetplan.cli.main import main
from hetplan.units import fmt_duration

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
LOCAL = str(CLUSTERS / "local-cpu.yaml")


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    assert exc.value.code in (0, None), out.err
    return 0, out.out


def test_predict_prints_a_long_epoch_in_minutes(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predict", "--model", "gpt-tiny", "--strategy", "dp", "--batch", "8",
            "--cluster", LOCAL, "--dataset-size", "100000", "--analytical"]  # fmt: skip
    _, out = _run([*argv, "--json"], capsys)
    epoch = json.loads(out)["epoch_time_s"]
    assert 60 < epoch < 3600  # minutes: the case in point
    _, out = _run(argv, capsys)
    line = next(x for x in out.splitlines() if x.startswith("epoch "))
    assert line.startswith(f"epoch of 12500 iterations: {epoch:.0f} s (")
    assert f"{fmt_duration(epoch, short=True)})" in line and " min)" in line
    assert f"{epoch:.3f} s" not in out
