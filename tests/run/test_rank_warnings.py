"""A rank's warnings written once each and read back as they come."""

from __future__ import annotations

import warnings
from pathlib import Path

from hetplan.run.loop.rank_warnings import WarningReader, captured_warnings, warnings_path


def test_each_distinct_warning_is_written_once(tmp_path: Path) -> None:
    with captured_warnings(tmp_path, 3):
        for _ in range(5):
            warnings.warn("same", UserWarning, stacklevel=1)
        warnings.warn("other", FutureWarning, stacklevel=1)
    found = WarningReader(tmp_path).read_new()
    assert [(w.rank, w.category, w.message) for w in found] == [
        (3, "UserWarning", "same"),
        (3, "FutureWarning", "other"),
    ]
    assert found[0].where.startswith("test_rank_warnings.py:")


def test_the_reader_returns_only_new_complete_lines(tmp_path: Path) -> None:
    reader = WarningReader(tmp_path)
    with captured_warnings(tmp_path, 0):
        warnings.warn("first", UserWarning, stacklevel=1)
    assert [w.message for w in reader.read_new()] == ["first"]
    with open(warnings_path(tmp_path, 0), "a") as f:
        f.write('{"rank": 0, "category": "UserWarning", "message": "half')  # still being written
    assert reader.read_new() == []
    with open(warnings_path(tmp_path, 0), "a") as f:
        f.write('", "where": "x.py:1"}\n')
    assert [w.message for w in reader.read_new()] == ["half"]


def test_torch_distributed_warnings_stay_in_the_log(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as logged, captured_warnings(tmp_path, 0):
        warnings.warn_explicit("internal", FutureWarning, "/x/torch/distributed/c10d.py", 7)
    assert WarningReader(tmp_path).read_new() == []
    assert [str(w.message) for w in logged] == ["internal"]


def test_without_a_folder_nothing_is_captured(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with captured_warnings(None, 0):
            warnings.warn("plain", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["plain"]
