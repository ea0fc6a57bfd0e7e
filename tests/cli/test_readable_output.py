"""What ``plan`` and ``predict`` print for a person to read (issue 28): durations in human
units, a table that fits 100 columns, the device limit named as the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetplan.cli.main import main
from hetplan.cli.output import console
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


# ------------------------------------------------------------------ the table in 100 columns

EXAMPLE = ["plan", "--model", "vgg16", "--dataset", "imagenet", "--batch", "256",
           "--cluster", str(CLUSTERS / "hetero-2node.yaml")]  # fmt: skip
"""``make example``'s search (scripts/example.sh)."""
WIDE_ONLY = ("staleness", "80% interval", "power W", "EDP J*s/it", "$/epoch")


def _table_and_legend(out: str) -> list[str]:
    """The lines from the table's title to the legend's end (the ties' lines follow, then the
    stage map)."""
    lines = out.splitlines()
    return lines[: next(i for i, x in enumerate(lines) if x.startswith("iteration of #1: "))]


def _header(lines: list[str]) -> str:
    return next(x for x in lines if "iteration" in x and "plan" in x)


def test_the_example_table_fits_100_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(console, "width", 100)
    _, out = _run([*EXAMPLE, "--out", str(tmp_path / "plan.json")], capsys)
    lines = _table_and_legend(out)
    assert max(map(len, lines)) <= 100
    assert "…" not in out  # no cell cut
    heads = [h.strip() for h in _header(lines).strip("┃").split("┃")]
    assert heads == ["#", "plan", "devices", "iteration", "epoch", "samples/s", "mem free",
                     "energy/it"]  # fmt: skip
    legend = " ".join(lines[lines.index(next(x for x in lines if x.startswith("└"))) + 1 :])
    for head in ("iteration", "epoch", "samples/s", "mem free", "energy/it"):
        assert f"{head}: " in legend
    for head in WIDE_ONLY:
        assert f"{head}: " not in legend  # only the columns shown are described
    assert legend.endswith(f"--wide adds {', '.join(WIDE_ONLY)}")
    assert " min │" in out  # the epoch in minutes (58.0 min for the winner)


def test_wide_shows_and_explains_every_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out = _run([*EXAMPLE, "--out", str(tmp_path / "plan.json"), "--wide"], capsys)
    lines = _table_and_legend(out)
    heads = [h.strip() for h in _header(lines).strip("┃").split("┃")]
    assert heads[:3] == ["#", "plan", "devices"] and set(WIDE_ONLY) <= set(heads)
    legend = " ".join(lines)
    for head in (*WIDE_ONLY, "mem free", "energy/it"):
        assert f"{head}: " in legend
    assert "--wide adds" not in legend


# ----------------------------------------------------------------------- the device limit

THREE_CPUS = """\
name: three-cpus
nodes:
  - name: local
    devices:
      - {type: cpu, count: 3}
    link: {type: shm}
"""
"""Three equal CPU devices, at most two used: the 3-device data-parallel baseline splits the
batch three ways and is predicted faster than every plan within the limit."""


def limited(tmp_path: Path) -> list[str]:
    cluster = tmp_path / "three-cpus.yaml"
    cluster.write_text(THREE_CPUS)
    return ["plan", "--model", "gpt-tiny", "--cluster", str(cluster), "--max-devices", "2",
            "--analytical"]  # fmt: skip


def test_a_baseline_over_the_device_limit_is_never_ranked_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = limited(tmp_path)
    out = ["--out", str(tmp_path / "plan.json")]
    _, text = _run([*args, *out, "--json"], capsys)
    data = json.loads(text)
    base = data["baselines"]["dp-equal"]
    assert base["outside_limits"] == ["3 devices > limit 2"]
    assert data["best"]["outside_limits"] == []
    faster = base["prediction"]["iteration_time_s"] < data["best"]["prediction"]["iteration_time_s"]
    assert faster  # what used to put it first
    assert "cpu left out: --max-devices 2" in data["reasons"]

    _, text = _run([*args, *out], capsys)
    rows = [x for x in text.splitlines() if x.startswith("│ ") and x.split("│")[1].strip()]
    ranks = [x.split("│")[1].strip() for x in rows]
    assert ranks[0] == "1" and data["best"]["label"] in rows[0]
    outside = [r for r, x in zip(ranks, rows, strict=True) if "dp-equal baseline" in x]
    assert outside == ["-"] and ranks.index("-") == len([r for r in ranks if r != "-"])
    assert "(dp-equal baseline; outside the limits: 3 devices > limit 2)" in " ".join(
        x.split("│")[2].strip() for x in text.splitlines() if x.startswith("│ ")
    )
    assert "cpu left out: --max-devices 2" in text
    assert "no feasible plan" not in text
