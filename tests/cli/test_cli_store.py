"""``hetplan store list`` / ``hetplan store remove`` on a store holding one profile of each
source (and a file written before provenance was kept)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from hetplan.cli.cmd_store import register
from hetplan.profile.fit import Stats
from hetplan.profile.importer import import_file
from hetplan.profile.store import save_profile
from hetplan.profile.types import Provenance
from hetplan.serde import to_data

LAYERS = ["stem", "layer1_0", "layer2_0", "pool", "head"]


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def group() -> None:  # keep the sub-app's name
        """Test app."""

    register(app)
    return app


def invoke(store: Path, *args: str):
    return CliRunner().invoke(_app(), ["store", *args, "--profiles", str(store)],
                              env={"COLUMNS": "250"})  # fmt: skip


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """resnet-tiny on cpu: imported at 1 and 4, profiled at 8 (10 steps, p90/p10 1.2),
    written back at 2; and an older file of bert-tiny's layers without provenance."""
    tmp = tmp_path_factory.mktemp("store")
    rows = [{"layer": n, "device_type": "cpu", "dtype": "fp32", "micro_batch": b,
             "fwd_s": 1e-4 * b, "bwd_s": 2e-4 * b} for b in (1, 4) for n in LAYERS]  # fmt: skip
    (tmp / "rows.json").write_text(json.dumps(rows))
    [imported] = import_file(tmp / "rows.json", "resnet-tiny")
    root = tmp / "profiles"
    save_profile(imported, root)
    step = Stats(median_s=1.1, p10_s=1.0, p90_s=1.2)
    prov = Provenance(when="2026-03-04T05:06:07+00:00", steps=10, spread=1.2)
    eight = dataclasses.replace(imported.batches[1], batch=8, step=step, provenance=prov)
    profiled = dataclasses.replace(imported, source="profiled", batch_sizes=(8,),
                                   batches=(eight,), device="cpu")  # fmt: skip
    save_profile(profiled, root)
    back = dataclasses.replace(imported.batches[0], batch=2, provenance=dataclasses.replace(
        prov, steps=30, runs=3, spread=1.1))  # fmt: skip
    written = dataclasses.replace(imported, source="written-back", batch_sizes=(2,),
                                  batches=(back,), history=(back,), device="train")  # fmt: skip
    save_profile(written, root)
    old = to_data(dataclasses.replace(imported, model="bert-tiny", device="cpu", steps=5))
    del old["source"]
    for b in old["batches"]:
        del b["provenance"]
    (root / "legacy.json").write_text(json.dumps(old))
    return root


def test_list_shows_each_size_with_its_provenance(store: Path) -> None:
    out = invoke(store, "list", "--json")
    assert out.exit_code == 0, out.output
    got = json.loads(out.output)["profiles"]
    rows = {(p["model"], p["source"], s["micro_batch"]): s for p in got for s in p["sizes"]}
    assert set(rows) == {
        ("resnet-tiny", "imported", 1), ("resnet-tiny", "imported", 4),
        ("resnet-tiny", "profiled", 8), ("resnet-tiny", "written-back", 2),
        ("bert-tiny", "profiled", 1), ("bert-tiny", "profiled", 4),
    }  # fmt: skip
    assert rows["resnet-tiny", "profiled", 8] == {
        "micro_batch": 8, "when": "2026-03-04T05:06:07+00:00", "steps": 10, "spread": 1.2,
        "runs": 1,
    }  # fmt: skip
    assert (rows["resnet-tiny", "written-back", 2]["runs"],) == (3,)
    assert rows["resnet-tiny", "imported", 1]["steps"] == 0  # unknown
    assert rows["bert-tiny", "profiled", 4]["steps"] == 5  # an older file: its profile's steps
    text = invoke(store, "list", "--model", "resnet-tiny", "--type", "cpu").output
    assert "written-back" in text and "bert-tiny" not in text and "1.20" in text
    assert "no profiles match" in invoke(store, "list", "--type", "H100-SXM").output


def test_remove_one_source_then_nothing_left_is_exit_2(tmp_path: Path, store: Path) -> None:
    copy = tmp_path / "profiles"
    copy.mkdir()
    for f in store.glob("*.json"):
        (copy / f.name).write_bytes(f.read_bytes())
    out = invoke(copy, "remove", "--type", "cpu", "--model", "resnet-tiny",
                 "--source", "written-back")  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "removed written-back profile (micro-batch 2)" in out.output
    assert not list(copy.glob("*written-back*"))
    assert len(list(copy.glob("*.json"))) == 3
    again = invoke(copy, "remove", "--type", "cpu", "--model", "resnet-tiny",
                   "--source", "written-back")  # fmt: skip
    assert again.exit_code == 2
    assert "no written-back profile of model 'resnet-tiny' on device type 'cpu'" in again.output
    out = invoke(copy, "remove", "--type", "cpu", "--model", "resnet-tiny")
    assert out.exit_code == 0 and len(list(copy.glob("*.json"))) == 1  # the legacy bert-tiny


def test_a_bad_source_is_exit_2_naming_it(store: Path) -> None:
    before = sorted(p.name for p in store.glob("*.json"))
    out = invoke(store, "remove", "--type", "cpu", "--model", "resnet-tiny", "--source", "old")
    assert out.exit_code == 2
    assert "--source 'old': expected one of profiled, written-back, imported, all" in out.output
    assert sorted(p.name for p in store.glob("*.json")) == before
