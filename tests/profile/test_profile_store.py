"""Profile store: exact JSON round trip, keys, directory resolution and lookup."""

import json
from pathlib import Path

import pytest

from hetplan.errors import InputError
from hetplan.profile.store import (
    PROFILE_DIR_ENV,
    find_profile,
    load_profile,
    load_profiles,
    profile_dir,
    profile_key,
    save_profile,
)
from hetplan.serde import to_data


def test_round_trip_is_exact(tmp_path: Path, make_profile) -> None:
    p = make_profile(batch_sizes=(1, 8), input_shape=(3, 32, 32))
    path = save_profile(p, tmp_path)
    assert path.name == "cpu__m__3x32x32__b1-8__fp32.json"
    back = load_profile(path)
    assert back == p
    assert to_data(back) == json.loads(path.read_text())


def test_key_names_every_part_and_is_file_safe() -> None:
    key = profile_key("A100-40GB", "gpt:layers=2,seq=64", (64,), [8, 1, 8], "bf16")
    assert key == "A100-40GB__gpt-layers-2-seq-64__64__b1-8__bf16"
    assert "/" not in profile_key("cpu", "models/my.py:fn", (), [1], "fp32")


def test_directory_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROFILE_DIR_ENV, raising=False)
    assert profile_dir() == Path("~/.cache/hetplan/profiles").expanduser()
    monkeypatch.setenv(PROFILE_DIR_ENV, str(tmp_path / "env"))
    assert profile_dir() == tmp_path / "env"
    assert profile_dir(tmp_path / "explicit") == tmp_path / "explicit"


def test_env_directory_is_used_for_save_and_find(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_profile
) -> None:
    monkeypatch.setenv(PROFILE_DIR_ENV, str(tmp_path))
    save_profile(make_profile())
    assert find_profile("cpu", "m", (8,), "fp32") == make_profile()


def test_find_matches_every_key_part(tmp_path: Path, make_profile) -> None:
    save_profile(make_profile(), tmp_path)
    save_profile(make_profile(device_type="V100-32GB"), tmp_path)
    save_profile(make_profile(dtype="bf16"), tmp_path)
    found = find_profile("V100-32GB", "m", [8], "fp32", directory=tmp_path)
    assert found is not None and found.device_type == "V100-32GB"
    assert find_profile("cpu", "m", (8,), "bf16", directory=tmp_path).dtype == "bf16"
    assert find_profile("cpu", "other", (8,), "fp32", directory=tmp_path) is None
    assert find_profile("cpu", "m", (9,), "fp32", directory=tmp_path) is None
    assert find_profile("cpu", "m", (8,), "fp32", batch_sizes=[1, 2], directory=tmp_path) is None


def test_find_prefers_widest_batch_range_then_newest(tmp_path: Path, make_profile) -> None:
    save_profile(make_profile(batch_sizes=(1, 4)), tmp_path)
    save_profile(make_profile(batch_sizes=(1, 2, 16)), tmp_path)
    save_profile(make_profile(batch_sizes=(2, 16), timestamp="2027-01-01T00:00:00+00:00"), tmp_path)
    best = find_profile("cpu", "m", (8,), "fp32", directory=tmp_path)
    assert best is not None and best.batch_sizes == (1, 2, 16)
    exact = find_profile("cpu", "m", (8,), "fp32", batch_sizes=(16, 2), directory=tmp_path)
    assert exact is not None and exact.batch_sizes == (2, 16)


def test_foreign_files_are_skipped_but_explicit_load_reports_them(
    tmp_path: Path, make_profile
) -> None:
    save_profile(make_profile(), tmp_path)
    bad = tmp_path / "zz.json"
    bad.write_text('{"device_type": "cpu"}')
    (tmp_path / "broken.json").write_text("{not json")
    assert len(load_profiles(tmp_path)) == 1
    assert load_profiles(tmp_path / "missing") == []
    with pytest.raises(InputError, match=r"zz\.json"):
        load_profile(bad)
