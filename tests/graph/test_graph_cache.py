"""The on-disk graph cache: keyed, round-trips exactly, optional and best effort."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hetplan.graph import build_graph, cache
from hetplan.graph import extract as extract_mod
from hetplan.graph.types import ModelGraph


@pytest.fixture
def cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(cache.CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(cache.NO_CACHE_ENV, raising=False)
    extract_mod._cached_graph.cache_clear()
    yield tmp_path
    extract_mod._cached_graph.cache_clear()


def test_a_zoo_graph_is_stored_and_read_back_unchanged(
    cache_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = build_graph("gpt-tiny")
    files = list((cache_root / "graphs").glob("*.json"))
    assert len(files) == 1
    extract_mod._cached_graph.cache_clear()

    def no_tracing(*_args: object) -> ModelGraph:
        raise AssertionError("traced although cached")

    monkeypatch.setattr(extract_mod, "_graph_of_built", no_tracing)
    assert build_graph("gpt-tiny") == first
    # The tensor-parallel structure (LayerInfo.tp_*) survives the round trip.
    assert [x.tp_units for x in first.layers] == [0, 2, 2, 2, 2, 0]
    assert first.layers[-1].tp_vocab == "head"


def test_every_key_part_changes_the_key() -> None:
    base = ("gpt-tiny", None, None, 2, "fp32")
    variants = [
        ("gpt-tiny:layers=2", None, None, 2, "fp32"),
        ("gpt-tiny", "cifar10", None, 2, "fp32"),
        ("gpt-tiny", None, 2, 2, "fp32"),
        ("gpt-tiny", None, None, 4, "fp32"),
        ("gpt-tiny", None, None, 2, "bf16"),
    ]
    keys = {cache.cache_key(*v) for v in [base, *variants]}
    assert len(keys) == 1 + len(variants)
    assert cache.cache_key(*base) == cache.cache_key(*base)


def test_no_cache_disables_reading_and_writing(
    cache_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cache.NO_CACHE_ENV, "1")
    assert cache.cache_dir() is None
    build_graph("resnet-tiny", "cifar10")
    assert not (cache_root / "graphs").exists()


def test_a_corrupt_or_stale_file_is_a_miss(cache_root: Path) -> None:
    graph = build_graph("resnet-tiny", "cifar10")
    key = cache.cache_key("resnet-tiny", "cifar10", None, 2, "fp32")
    path = cache_root / "graphs" / f"{key}.json"
    assert cache.load(key) == graph
    path.write_text("{not json")
    assert cache.load(key) is None
    path.write_text('{"name": "x"}')  # missing fields
    assert cache.load(key) is None


def test_custom_models_are_not_cached(cache_root: Path, tmp_path: Path) -> None:
    src = tmp_path / "net.py"
    src.write_text(
        "import torch\ndef make():\n    return torch.nn.Sequential(torch.nn.Linear(4, 2)), (4,)\n"
    )
    build_graph(f"{src}:make")
    assert not list((cache_root / "graphs").glob("*.json"))


def test_an_unwritable_cache_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(cache.CACHE_DIR_ENV, str(blocker))
    monkeypatch.delenv(cache.NO_CACHE_ENV, raising=False)
    graph = build_graph("resnet-tiny", "cifar10", depth=2)
    cache.store("k", graph)  # no error
    assert cache.load("k") is None
    assert not list(tmp_path.glob("**/*.tmp"))
