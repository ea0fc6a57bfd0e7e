"""Property test: random plans built from options predict without error, and their simulated
timelines respect every dependency and never run two actions on one resource at once."""

from __future__ import annotations

import itertools
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st
from predict_synthetic import FixedCompute, cluster, graph

from hetplan.planspec import ModelRef
from hetplan.predict import plan_from_options, predict

G = graph(8, params=500_000, cut=1000, saved=4000)
C = cluster(8, speeds=(1.0, 1.0, 0.5, 0.5, 2.0, 1.0, 0.25, 1.0), overhead=2e-5)
EPS = 1e-9


@st.composite
def options(draw: st.DrawFn) -> dict[str, object]:
    strategy = draw(st.sampled_from(["dp", "ps", "gpipe", "1f1b", "pipedream", "hybrid"]))
    tp = draw(st.sampled_from([1, 2]))
    kw: dict[str, object] = {"strategy": strategy, "tp": tp}
    if strategy in ("gpipe", "1f1b", "pipedream"):
        kw["pp"] = draw(st.integers(1, 8 // tp))
    elif strategy == "hybrid":
        kw["dp"] = draw(st.integers(1, 2))
        kw["pp"] = draw(st.integers(1, 8 // (tp * 2)))
        kw["sync"] = draw(st.sampled_from(["bsp", "wsp"]))
        kw["staleness"] = draw(st.integers(0, 2))
    elif strategy == "ps":
        kw["ps_async"] = draw(st.booleans())
    kw["batch"] = draw(st.integers(64, 128))  # >= 8 replicas x 8 micro-batches
    kw["micro_batches"] = draw(st.integers(1, 8))
    kw["optimizer"] = draw(st.sampled_from(["sgd", "momentum", "adam"]))
    kw["bucket_mb"] = draw(st.sampled_from([0.5, 2.0, 25.0]))
    perm = draw(st.permutations([d.id for d in C.devices]))
    kw["devices"] = list(perm)
    return kw


@settings(max_examples=60, deadline=None)
@given(options())
def test_random_plans_predict_consistently(kw: dict[str, object]) -> None:
    plan = plan_from_options(G, C, model=ModelRef(name="syn"), compute=FixedCompute(), **kw)  # type: ignore[arg-type]
    pred = predict(plan, G, C, FixedCompute(), dataset_size=1000)
    tl = pred.timeline
    acts = tl.schedule.actions
    by_res: dict[str, list[int]] = defaultdict(list)
    for i, act in enumerate(acts):
        assert abs(tl.end[i] - tl.start[i] - act.duration_s) <= EPS
        for d in act.deps:
            assert tl.start[i] >= tl.end[d] - EPS
        for r in act.resources:
            by_res[r].append(i)
    for ids in by_res.values():
        for a, b in itertools.pairwise(ids):
            assert tl.start[b] >= tl.end[a] - EPS
    assert pred.iteration_time_s > 0
    assert abs(pred.samples_per_s * pred.iteration_time_s - plan.global_batch) <= 1e-6 * 128
    for dev in pred.devices:
        assert 0.0 <= dev.busy_fraction <= 1.0 + EPS
        total = dev.compute_s + dev.exposed_comm_s + dev.bubble_s
        assert abs(total - pred.iteration_time_s) <= 1e-6 * pred.iteration_time_s
    assert set(plan.devices) <= {d.id for d in pred.devices}
