"""Pipeline partitioners: exact answers on hand-made cases, brute force on random small ones."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetplan.errors import InfeasibleError, InputError
from hetplan.plan.partition import (
    Partition,
    PartitionInfeasible,
    balanced_split_by_cost,
    equal_split,
    partition_exact,
    partition_fast,
)

INF = math.inf
Partitioner = Callable[..., Partition]

# ---------------------------------------------------------------- brute force (plain loops)


def _compositions(n: int, k: int) -> Iterator[list[tuple[int, int]]]:
    for cuts in itertools.combinations(range(1, n), k - 1):
        bounds = [0, *cuts, n]
        yield [(bounds[a], bounds[a + 1]) for a in range(k)]


def brute_force(
    times: np.ndarray,
    cut: np.ndarray,
    *,
    mem: np.ndarray | None = None,
    cap: np.ndarray | None = None,
    comm: str = "outgoing",
    prefix: bool = False,
) -> list[tuple[float, int, float]]:
    """(bottleneck, stages, total) of every feasible placement; cut is (S, S, L-1)."""
    s_count, nl = times.shape
    out = []
    for k in range(1, min(s_count, nl) + 1):
        subsets = [tuple(range(k))] if prefix else itertools.combinations(range(s_count), k)
        for slots in subsets:
            for stages in _compositions(nl, k):
                stage_times = []
                for a, ((i, j), s) in enumerate(zip(stages, slots, strict=True)):
                    if mem is not None and cap is not None and sum(mem[s][i:j]) > cap[s]:
                        break
                    compute = sum(times[s][i:j])
                    send = cut[s, slots[a + 1], j - 1] if a + 1 < k else 0.0
                    stage_times.append(compute + send if comm == "outgoing" else max(compute, send))
                else:
                    if max(stage_times) < INF:
                        out.append((max(stage_times), k, sum(stage_times)))
    return out


# ---------------------------------------------------------------- random instances


@st.composite
def instances(draw: st.DrawFn) -> dict:
    s_count = draw(st.integers(1, 4))
    nl = draw(st.integers(1, 7))
    small = st.integers(0, 6).map(float)
    times = np.array(
        [
            [
                draw(st.one_of(small, st.just(INF)) if draw(st.booleans()) else small)
                for _ in range(nl)
            ]
            for _ in range(s_count)
        ]
    )
    cut = np.array(
        [[[draw(small) for _ in range(nl - 1)] for _ in range(s_count)] for _ in range(s_count)]
    ).reshape(s_count, s_count, nl - 1)
    case: dict = {
        "times": times,
        "cut": cut,
        "comm": draw(st.sampled_from(["outgoing", "overlap"])),
    }
    case["prefix"] = draw(st.booleans())
    if draw(st.booleans()):
        case["mem"] = np.array(
            [[draw(st.integers(0, 4)) for _ in range(nl)] for _ in range(s_count)]
        )
        case["cap"] = np.array([draw(st.integers(0, 12)) for _ in range(s_count)], dtype=float)
    return case


def _run(fn: Partitioner, case: dict) -> Partition:
    return fn(
        case["times"],
        case["cut"],
        layer_mem=case.get("mem"),
        mem_cap=case.get("cap"),
        comm=case["comm"],
        slots="prefix" if case["prefix"] else "subset",
    )


@settings(max_examples=250, deadline=None)
@given(instances())
def test_exact_and_fast_match_brute_force(case: dict) -> None:
    options = brute_force(
        case["times"],
        case["cut"],
        mem=case.get("mem"),
        cap=case.get("cap"),
        comm=case["comm"],
        prefix=case["prefix"],
    )
    if not options:
        with pytest.raises(PartitionInfeasible):
            _run(partition_exact, case)
        with pytest.raises(PartitionInfeasible):
            _run(partition_fast, case)
        return
    best = min(options)  # bottleneck, then fewer stages, then total time
    exact = _run(partition_exact, case)
    assert exact.exact
    assert (exact.bottleneck, exact.num_stages, exact.total_time) == pytest.approx(best)
    fast = _run(partition_fast, case)
    assert fast.bottleneck >= best[0]  # integer data: sums are exact, no rounding slack needed
    assert fast.bottleneck <= best[0] * (1 + 1e-9)
    if fast.exact:
        assert fast.bottleneck == best[0]
    for part in (exact, fast):  # the reported placement is what it claims
        assert part.stages[0][0] == 0 and part.stages[-1][1] == case["times"].shape[1]
        assert all(a[1] == b[0] for a, b in itertools.pairwise(part.stages))
        assert list(part.slots) == sorted(set(part.slots))
        if case["prefix"]:
            assert list(part.slots) == list(range(part.num_stages))


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 14),
    st.integers(1, 5),
    st.integers(0, 2**32 - 1),
    st.sampled_from(["outgoing", "overlap"]),
    st.booleans(),
)
def test_fast_never_beats_exact_and_is_exact_when_it_says_so(
    nl: int, ns: int, seed: int, comm: str, with_mem: bool
) -> None:
    """Float data (rounding matters): both price stages the same way, so they compare exactly."""
    rng = np.random.default_rng(seed)
    kwargs: dict = {
        "layer_time": rng.uniform(0.2, 2.0, (ns, 1)) * rng.uniform(0.1, 1.0, (1, nl)),
        "cut_time": rng.uniform(0.0, 0.5, (ns, ns, nl - 1)),
        "comm": comm,
    }
    if with_mem:
        mem = rng.uniform(1.0, 3.0, nl)
        kwargs |= {"layer_mem": mem, "mem_cap": rng.uniform(0.2, 1.0, ns) * mem.sum()}
    try:
        exact = partition_exact(**kwargs)
    except PartitionInfeasible:
        with pytest.raises(PartitionInfeasible):
            partition_fast(**kwargs)
        return
    fast = partition_fast(**kwargs)
    assert exact.bottleneck <= fast.bottleneck <= exact.bottleneck * (1 + 1e-9)
    if fast.exact:
        assert fast.bottleneck == exact.bottleneck


# ---------------------------------------------------------------- hand-made cases


@pytest.mark.parametrize("fn", [partition_exact, partition_fast])
def test_speed_ratio_two_to_one_splits_four_two(fn: Partitioner) -> None:
    times = np.array([[1.0] * 6, [2.0] * 6])  # slot 0 twice as fast
    part = fn(times, np.zeros((1, 5)))
    assert part.stages == ((0, 4), (4, 6))
    assert part.slots == (0, 1)
    assert part.stage_times == (4.0, 4.0)
    assert part.bottleneck == 4.0
    assert part.exact


@pytest.mark.parametrize("fn", [partition_exact, partition_fast])
def test_heavy_communication_gives_a_single_stage_on_the_fastest_slot(fn: Partitioner) -> None:
    times = np.array([[2.0] * 4, [1.0] * 4, [1.5] * 4])
    part = fn(times, np.full((3, 3, 3), 100.0))
    assert part.stages == ((0, 4),)
    assert part.slots == (1,)
    assert part.bottleneck == 4.0


@pytest.mark.parametrize("fn", [partition_exact, partition_fast])
def test_prefix_mode_must_start_on_slot_zero(fn: Partitioner) -> None:
    times = np.array([[3.0] * 4, [1.0] * 4])
    cut = np.full((1, 3), 100.0)
    assert fn(times, cut, slots="subset").slots == (1,)
    part = fn(times, cut, slots="prefix")
    assert part.slots == (0,)
    assert part.bottleneck == 12.0


@pytest.mark.parametrize("fn", [partition_exact, partition_fast])
def test_cheap_cut_is_chosen_over_the_longest_first_stage(fn: Partitioner) -> None:
    # cut c follows layer c; only the cut after layer 1 is cheap
    times = np.ones((2, 6))
    part = fn(times, np.array([[5.0, 0.0, 5.0, 5.0, 5.0]]))
    assert part.stages == ((0, 2), (2, 6))
    assert part.stage_times == (2.0, 4.0)
    assert part.send_times == (0.0, 0.0)


def test_overlap_model_takes_the_max_of_compute_and_send() -> None:
    times = np.ones((2, 4))
    cut = np.array([[3.0, 2.5, 3.0]])
    outgoing = partition_exact(times, cut, comm="outgoing")
    assert outgoing.stages == ((0, 4),)  # no split beats 4 once the send is added
    overlap = partition_exact(times, cut, comm="overlap")
    assert overlap.stages == ((0, 2), (2, 4))
    assert overlap.stage_times == (2.5, 2.0)
    assert overlap.bottleneck == 2.5


def test_tie_break_prefers_fewer_stages_then_lower_total() -> None:
    times = np.ones((3, 4))
    part = partition_exact(times, np.zeros((2, 3)))
    assert part.bottleneck == 2.0
    assert part.num_stages == 2  # (2, 1, 1) on 3 slots also reaches 2
    # layers 1, 1, 3: two stages (0..2 | 2..3) reach the bottleneck 3 on any slot pair;
    # the cheapest handoff gives the lowest total time
    cut = np.zeros((3, 3, 2))
    cut[0, 1, 1], cut[0, 2, 1], cut[1, 2, 1] = 0.75, 0.5, 0.25
    part = partition_exact(np.tile([1.0, 1.0, 3.0], (3, 1)), cut)
    assert part.bottleneck == 3.0 and part.slots == (1, 2) and part.total_time == 5.25


def test_adjacent_cut_array_only_allows_consecutive_slots() -> None:
    times = np.array([[1.0] * 4, [9.0] * 4, [1.0] * 4])
    adjacent = partition_exact(times, np.zeros((2, 3)))
    assert adjacent.bottleneck == 4.0 and adjacent.slots in ((0,), (2,))
    full = partition_exact(times, np.zeros((3, 3, 3)))
    assert full.bottleneck == 2.0 and full.slots == (0, 2)


def test_callable_cut_time_equals_the_array() -> None:
    rng = np.random.default_rng(3)
    times = rng.uniform(0.5, 2.0, (4, 9))
    cut = rng.uniform(0.0, 1.0, (4, 4, 8))
    by_array = partition_exact(times, cut)
    by_call = partition_exact(times, lambda a, b: cut[a, b])
    assert by_call == by_array
    assert partition_fast(times, lambda a, b: cut[a, b]).bottleneck == by_array.bottleneck


def test_infinite_layer_time_keeps_the_layer_off_that_slot() -> None:
    times = np.array([[1.0, 1.0, INF, 1.0], [5.0, 5.0, 1.0, 5.0]])
    part = partition_exact(times, np.zeros((1, 3)))
    assert part.stages == ((0, 2), (2, 4)) and part.slots == (0, 1)
    assert part.bottleneck == 6.0


def test_memory_limit_moves_the_cut() -> None:
    times = np.array([[1.0] * 6, [2.0] * 6])
    part = partition_exact(
        times, np.zeros((1, 5)), layer_mem=[1.0] * 6, fixed_mem=[1.0, 0.0], mem_cap=[3.0, 10.0]
    )
    assert part.stages == ((0, 2), (2, 6))  # slot 0 holds only 2 layers
    assert part.stage_mem == (3.0, 4.0)
    assert (
        partition_fast(
            times, np.zeros((1, 5)), layer_mem=[1.0] * 6, fixed_mem=[1.0, 0.0], mem_cap=[3.0, 10.0]
        ).bottleneck
        == part.bottleneck
    )


@pytest.mark.parametrize("fn", [partition_exact, partition_fast])
def test_layer_too_big_for_every_slot_reports_the_numbers(fn: Partitioner) -> None:
    with pytest.raises(PartitionInfeasible) as err:
        fn(
            np.ones((2, 3)),
            np.zeros((1, 2)),
            layer_mem=[1.0, 50.0, 1.0],
            fixed_mem=[2.0, 4.0],
            mem_cap=[40.0, 48.0],
        )
    e = err.value
    assert isinstance(e, InfeasibleError)
    # slot 1 is the roomiest for it (short by 6 bytes; slot 0 by 12)
    assert (e.layer, e.slot, e.needed_bytes, e.capacity_bytes) == (1, 1, 54.0, 48.0)
    assert "layer 1" in str(e) and "54" in str(e) and "48" in str(e)


@pytest.mark.parametrize("fn", [partition_exact, partition_fast])
def test_not_enough_memory_in_total_reports_the_numbers(fn: Partitioner) -> None:
    # each slot holds one layer of 6 bytes (capacity 10); three layers, two slots
    with pytest.raises(PartitionInfeasible) as err:
        fn(np.ones((2, 3)), np.zeros((1, 2)), layer_mem=[6.0] * 3, mem_cap=[10.0, 10.0])
    e = err.value
    assert (e.layer, e.slot, e.needed_bytes, e.capacity_bytes) == (1, 0, 12.0, 10.0)
    assert "layers 0..1" in str(e)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"layer_time": np.ones((2, 3)), "cut_time": np.zeros((2, 2))}, "cut_time"),
        ({"layer_time": np.array([[1.0, -1.0]]), "cut_time": np.zeros((0, 1))}, "layer_time"),
        (
            {"layer_time": np.ones((1, 2)), "cut_time": np.zeros((0, 1)), "mem_cap": [1, 2]},
            "mem_cap",
        ),
        ({"layer_time": np.ones((2, 2)), "cut_time": np.array([[np.nan]])}, "cut_time"),
    ],
)
def test_malformed_input_names_the_argument(kwargs: dict, field: str) -> None:
    with pytest.raises(InputError, match=field):
        partition_exact(**kwargs)


def test_fast_on_a_larger_instance_equals_exact() -> None:
    rng = np.random.default_rng(7)
    times = rng.uniform(0.5, 2.0, (6, 1)) * rng.uniform(0.1, 1.0, (1, 30))
    cut = rng.uniform(0.0, 0.3, (6, 6, 29))
    mem = rng.uniform(1.0, 3.0, 30)
    exact = partition_exact(times, cut, layer_mem=mem, mem_cap=np.full(6, 15.0))
    fast = partition_fast(times, cut, layer_mem=mem, mem_cap=np.full(6, 15.0))
    assert fast.exact and fast.bottleneck == exact.bottleneck


# ---------------------------------------------------------------- baselines


def test_equal_split() -> None:
    assert equal_split(6, 2) == [(0, 3), (3, 6)]
    assert equal_split(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert equal_split(3, 3) == [(0, 1), (1, 2), (2, 3)]
    with pytest.raises(InputError, match="stages"):
        equal_split(2, 3)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=8), st.integers(1, 8))
def test_balanced_split_by_cost_matches_brute_force(costs: list[int], stages: int) -> None:
    if stages > len(costs):
        with pytest.raises(InputError):
            balanced_split_by_cost(costs, stages)
        return
    split = balanced_split_by_cost(costs, stages)
    assert len(split) == stages and split[0][0] == 0 and split[-1][1] == len(costs)
    assert all(i < j for i, j in split)
    best = min(max(sum(costs[i:j]) for i, j in c) for c in _compositions(len(costs), stages))
    assert max(sum(costs[i:j]) for i, j in split) == best


def test_balanced_split_by_cost_hand_case() -> None:
    assert balanced_split_by_cost([1, 2, 3, 4, 5, 6, 7, 8, 9], 3) == [(0, 5), (5, 7), (7, 9)]
