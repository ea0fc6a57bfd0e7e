"""The windowed rank's held state walked over hand-made action lists (hand counts)."""

from __future__ import annotations

from hetplan.schedule.types import Action, ActionKind
from hetplan.schedule.window_state import WindowState, stashed_microbatches, window_state

G, W = 10.0, 3.0  # bytes of one gradient set, one weight copy


def _act(kind: ActionKind, iteration: int, microbatch: int = -1, nbytes: float = 0.0) -> Action:
    return Action(
        kind=kind, device="d", resources=("d",), duration_s=0.0, microbatch=microbatch,
        iteration=iteration, nbytes=nbytes,
    )  # fmt: skip


def _wsp_like() -> list[Action]:
    """Iteration 0's backward and wave (two buckets of 6 and 4), then iteration 1's first
    micro-batch before iteration 0's optimizer (staleness 1)."""
    return [
        _act("fwd", 0, 0), _act("bwd", 0, 0), _act("allreduce", 0, nbytes=6.0),
        _act("allreduce", 0, nbytes=4.0), _act("fwd", 1, 1), _act("bwd", 1, 1),
        _act("optimizer", 0), _act("allreduce", 1, nbytes=6.0), _act("optimizer", 1),
    ]  # fmt: skip


def test_gradient_sets_and_buckets_of_two_iterations() -> None:
    peaks = window_state(_wsp_like(), G, W)
    # in iteration 1's backward: both gradient sets and iteration 0's two buckets
    assert peaks.in_backward == WindowState(gradient_sets=2, bucket_bytes=10.0, weight_copies=0)
    # outside a backward the most is at iteration 0's second bucket (1 set + 10) or after
    # the optimizer of 0 with iteration 1's first bucket (1 set + 6): 20 > 16
    assert peaks.outside == WindowState(gradient_sets=1, bucket_bytes=10.0, weight_copies=0)


def test_stashed_copy_lives_from_its_forward_to_its_backward() -> None:
    """Micro-batch 1's forward runs before iteration 0's optimizer and its backward after:
    it runs on a copy (one version), freed after its backward."""
    actions = [
        _act("fwd", 0, 0), _act("fwd", 1, 1), _act("bwd", 0, 0), _act("optimizer", 0),
        _act("bwd", 1, 1), _act("optimizer", 1), _act("fwd", 2, 2), _act("bwd", 2, 2),
    ]  # fmt: skip
    assert stashed_microbatches(actions) == {1}
    peaks = window_state(actions, G, W)
    assert peaks.in_backward == WindowState(gradient_sets=1, bucket_bytes=0.0, weight_copies=1)
    # after micro-batch 1's backward the copy is gone: iteration 2's backward holds none
    late = window_state(actions[5:], G, W)
    assert late.in_backward.weight_copies == 0


def test_nothing_held_without_actions() -> None:
    empty = WindowState(gradient_sets=0, bucket_bytes=0.0, weight_copies=0)
    peaks = window_state([], G, W)
    assert peaks.in_backward == empty and peaks.outside == empty
