"""``hetplan models``' list: built from the zoo, then served from its cache unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetplan.graph import catalog
from hetplan.graph.zoo import ZOO


def test_cached_list_equals_the_built_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETPLAN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("HETPLAN_NO_CACHE", raising=False)
    built = catalog.list_models()
    assert [r.name for r in built] == list(ZOO)
    assert len(list((tmp_path / "graphs").glob("models-*.json"))) == 1

    def no_build(name: str) -> catalog.ModelSummary:
        raise AssertionError(f"{name} was built although the list is cached")

    monkeypatch.setattr(catalog, "summarize", no_build)
    assert catalog.list_models() == built


def test_unreadable_cache_is_a_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETPLAN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("HETPLAN_NO_CACHE", raising=False)
    first = catalog.list_models()
    (path,) = (tmp_path / "graphs").glob("models-*.json")
    path.write_text('[{"name": 1}]')
    assert catalog.list_models() == first
