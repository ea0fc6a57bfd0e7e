"""Provenance of stored profiles (also of files older than it), the runs' weighted median,
and which profile prices a size."""

import dataclasses
import statistics
from pathlib import Path

import pytest

from hetplan.cluster.catalog import device_type
from hetplan.cluster.spec import Device
from hetplan.graph.types import LayerInfo, ModelGraph
from hetplan.profile.fit import Stats
from hetplan.profile.measured import MeasuredCompute, best_profiles
from hetplan.profile.merge import KEPT_RUNS, kept_runs, merge_runs, weighted_median
from hetplan.profile.provenance import provenance_of, source_of
from hetplan.profile.store import find_profile, load_profile, profile_path, save_profile
from hetplan.profile.types import Profile, Provenance
from hetplan.serde import from_data, to_data


def _strip(data: object) -> object:
    """``data`` as a file written before provenance: no source, history or provenance keys."""
    if isinstance(data, dict):
        gone = ("source", "history", "provenance")
        return {k: _strip(v) for k, v in data.items() if k not in gone}
    if isinstance(data, list):
        return [_strip(v) for v in data]
    return data


@pytest.mark.parametrize(
    ("device", "source"), [("cpu", "profiled"), ("train", "written-back"), ("imported", "imported")]
)
def test_files_without_provenance_load_and_say_where_they_came_from(
    make_profile, device: str, source: str
) -> None:
    p = dataclasses.replace(make_profile(), device=device)
    old = from_data(Profile, _strip(to_data(p)), "old.json")
    assert old.source is None and old.history == ()
    assert source_of(old) == source
    prov = provenance_of(old, old.batches[0])
    assert prov.when == old.timestamp and prov.runs == 1
    if source == "imported":
        assert prov.spread is None
    else:  # the factory's step times: p10 0.9 s, p90 1.1 s over 3 steps
        assert (prov.steps, prov.spread) == (3, pytest.approx(1.1 / 0.9))


def test_an_unknown_source_is_refused_naming_it(make_profile) -> None:
    data = to_data(make_profile())
    data["source"] = "guessed"
    with pytest.raises(Exception, match="source: 'guessed'; expected one of profiled"):
        from_data(Profile, data, "bad.json")


@pytest.mark.parametrize("weights", [[1, 1], [1, 3], [2, 2, 2], [5, 1, 1, 1], [3, 2, 4, 1, 2]])
def test_weighted_median_equals_the_median_of_repeated_values(weights: list[int]) -> None:
    values = [0.7, 0.1, 0.4, 0.9, 0.25][: len(weights)]
    repeated = [v for v, w in zip(values, weights, strict=True) for _ in range(w)]
    assert weighted_median(values, weights) == pytest.approx(statistics.median(repeated))


def _run(make_profile, batch: int, seconds: float, steps: int, when: str):
    b = make_profile(batch_sizes=(batch,)).batches[0]
    s = Stats(median_s=seconds, p10_s=seconds, p90_s=seconds)
    layers = tuple(dataclasses.replace(t, fwd=s, bwd=s) for t in b.layers)
    prov = Provenance(when=when, steps=steps, spread=1.1)
    return dataclasses.replace(b, layers=layers, provenance=prov)


def test_merge_is_the_steps_weighted_median_and_keeps_the_newest_runs(make_profile) -> None:
    runs = [_run(make_profile, 2, t, n, f"2026-01-0{i + 1}") for i, (t, n) in
            enumerate([(1.0, 10), (3.0, 10), (2.0, 25)])]  # fmt: skip
    merged = merge_runs(runs)
    # 45 steps: the 25 at 2.0 s span the middle (sorted: 10 at 1.0, 25 at 2.0, 10 at 3.0).
    assert merged.layers[0].fwd.median_s == 2.0
    assert merged.provenance == Provenance(when="2026-01-03", steps=45, spread=1.1, runs=3)
    many = [_run(make_profile, 2, float(i), 5, f"t{i:02d}") for i in range(KEPT_RUNS + 3)]
    other = _run(make_profile, 4, 9.0, 5, "t99")
    kept = kept_runs([*many, other], [_run(make_profile, 2, 0.5, 5, "t50")])
    at2 = [r for r in kept if r.batch == 2]
    assert len(at2) == KEPT_RUNS and at2[-1].layers[0].fwd.median_s == 0.5
    assert [r.layers[0].fwd.median_s for r in at2[:-1]] == [float(i) for i in range(4, 11)]
    assert [r for r in kept if r.batch == 4] == [other]


GRAPH = ModelGraph(
    name="m", input_shape=(8,), input_bytes=32, dtype="fp32", cut_bytes=(4,),
    layers=tuple(
        LayerInfo(name=n, fwd_flops=1e3, bwd_flops=2e3, params=0, param_bytes=0, out_bytes=4,
                  saved_bytes=4, fwd_io_bytes=8, bwd_io_bytes=8)
        for n in ("l0", "l1")
    ),
)  # fmt: skip


def test_profiled_wins_and_one_size_prices_only_itself(make_profile) -> None:
    profiled = make_profile(batch_sizes=(4,))
    back = dataclasses.replace(
        make_profile(batch_sizes=(1, 2), timestamp="2030-01-01T00:00:00+00:00"),
        source="written-back",
    )
    both = [profiled, back]
    assert best_profiles(both, GRAPH, batch=4)["cpu"] is profiled  # back is newer
    assert best_profiles(both, GRAPH, batch=2)["cpu"] is back
    assert best_profiles(both, GRAPH, batch=8)["cpu"] is back  # a fit over 2 sizes prices any
    assert best_profiles([profiled], GRAPH, batch=2) == {}


def test_written_back_files_never_share_a_name_and_find_skips_them(
    tmp_path: Path, make_profile
) -> None:
    p = make_profile()
    back = dataclasses.replace(p, source="written-back")
    assert profile_path(back, tmp_path).name == "cpu__m__8__b1-2-4__fp32__written-back.json"
    save_profile(back, tmp_path)
    assert find_profile("cpu", "m", (8,), "fp32", directory=tmp_path) is None
    assert find_profile("cpu", "m", (8,), "fp32", directory=tmp_path, written_back=True) == back
    save_profile(p, tmp_path)
    assert load_profile(profile_path(p, tmp_path)) == p
    assert find_profile("cpu", "m", (8,), "fp32", directory=tmp_path) == p


def test_written_back_costs_say_so(make_profile) -> None:
    back = dataclasses.replace(make_profile(), source="written-back")
    dev = Device(id="n0.0", type=device_type("cpu"), node="n0", index=0)
    sources = {c.source for c in MeasuredCompute([back]).layer_costs(GRAPH, dev, 2)}
    assert sources == {"measured on cpu (written back)"}
