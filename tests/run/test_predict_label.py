"""``train``'s prediction says what priced it: a store holding another model's profile is
not "measured" for this model."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetplan.cli.main import main
from hetplan.cluster import load_cluster
from hetplan.planspec import Plan
from hetplan.run.train import predict_plan
from hetplan.serde import load_file

LOCAL = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "local-cpu.yaml"


def _cli(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code in (0, None)


def _plan(model: str, tmp: Path) -> Plan:
    out = tmp / f"{model}.json"
    _cli(["plan", "--model", model, "--batch", "8", "--cluster", str(LOCAL), "--strategies",
          "dp", "--out", str(out), "--json", "--analytical"])  # fmt: skip
    return load_file(Plan, out)


def test_label_follows_the_layers_priced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETPLAN_PROFILE_DIR", str(tmp_path / "store"))
    _cli(["profile", "gpt-tiny", "--batch", "4", "--steps", "1", "--warmup", "0", "--json"])
    cluster = load_cluster(LOCAL)
    _, same = predict_plan(_plan("gpt-tiny", tmp_path), cluster)
    _, other = predict_plan(_plan("resnet-tiny", tmp_path), cluster)
    assert same.startswith("measured on cpu"), same
    assert other == "analytical", other
