"""What a windowed rank (asynchronous PipeDream, WSP) holds beyond one set of weights, walked
over its actions as :class:`hetplan.run.execute.window.WindowExecutor` runs them.

The window executor keeps, per rank:

- one gradient set per iteration from that iteration's first backward on this rank to its
  optimizer action (``WindowExecutor._acc``): with WSP's wave all-reduce an iteration's
  optimizer waits for its wave, while the next iteration's backwards already add into their
  own set;
- the flat buckets of each iteration's wave all-reduce from the allreduce action that
  launches them to that iteration's optimizer action (``WaveSync``: ``torch.cat`` per
  bucket, copied back when waited);
- one copy of the weights per older version in use (weight stashing): a micro-batch with an
  optimizer action between its forward and its backward runs both on a copy of the weights
  its forward saw, made at that forward and freed after the last backward of that version
  (:func:`stashed_microbatches`).

:func:`window_state` walks a rank's actions and returns the counts at the moments the sum of
those bytes is largest, during a backward and outside one. Pure: actions in, counts out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hetplan.schedule.types import Action


def stashed_microbatches(actions: Sequence[Action]) -> set[int]:
    """Micro-batches with an optimizer action between their forward and their backward here."""
    steps_before: dict[int, int] = {}
    out: set[int] = set()
    done = 0
    for act in actions:
        if act.kind == "optimizer":
            done += 1
        elif act.kind == "fwd":
            steps_before[act.microbatch] = done
        elif act.kind == "bwd" and act.part <= 0 and done > steps_before.get(act.microbatch, done):
            out.add(act.microbatch)
    return out


@dataclass(frozen=True, kw_only=True)
class WindowState:
    """At a windowed rank's peak of held state: what it holds beyond its weights."""

    gradient_sets: int
    """Iterations whose gradients are held (each a whole set of the stage's gradients)."""
    bucket_bytes: float
    """Bytes of wave all-reduce buckets held (launched, not yet written back)."""
    weight_copies: int
    """Stashed copies of the stage's weights held."""


@dataclass(frozen=True, kw_only=True)
class WindowPeaks:
    """The held state at its largest during a backward and outside one (where the
    backward's transient buffers are not alive)."""

    in_backward: WindowState
    outside: WindowState


def window_state(actions: Sequence[Action], grads: float, weights: float) -> WindowPeaks:
    """Walk ``actions`` (one rank's, in order); ``grads`` and ``weights``: the bytes of one
    gradient set and one weight copy. Returns, among the backward actions and among the
    others, the counts where ``gradient_sets x grads + bucket_bytes + weight_copies x
    weights`` is largest."""
    stashed = stashed_microbatches(actions)
    last_bwd = {a.microbatch: i for i, a in enumerate(actions) if a.kind == "bwd"}
    live_sets: set[int] = set()
    buckets: dict[int, float] = {}
    users: dict[int, int] = {}  # weight version -> stashed micro-batches not yet done
    version_of: dict[int, int] = {}
    version = 0
    none = WindowState(gradient_sets=0, bucket_bytes=0.0, weight_copies=0)
    best = {True: none, False: none}  # in a backward, outside

    def held(s: WindowState) -> float:
        return s.gradient_sets * grads + s.bucket_bytes + s.weight_copies * weights

    for i, act in enumerate(actions):
        if act.kind == "fwd" and act.microbatch in stashed:
            version_of[act.microbatch] = version
            users[version] = users.get(version, 0) + 1
        elif act.kind == "bwd":
            live_sets.add(act.iteration)
        elif act.kind == "allreduce":
            buckets[act.iteration] = buckets.get(act.iteration, 0.0) + act.nbytes
        elif act.kind == "optimizer":
            live_sets.discard(act.iteration)
            buckets.pop(act.iteration, None)
            version += 1
        now = WindowState(
            gradient_sets=len(live_sets),
            bucket_bytes=sum(buckets.values()),
            weight_copies=len(users),
        )
        key = act.kind == "bwd"
        if held(now) > held(best[key]):
            best[key] = now
        if key and last_bwd.get(act.microbatch) == i and act.microbatch in version_of:
            v = version_of.pop(act.microbatch)
            users[v] -= 1
            if users[v] == 0:
                del users[v]
    return WindowPeaks(in_backward=best[True], outside=best[False])
