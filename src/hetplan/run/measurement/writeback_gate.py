"""Which runs and ranks ``hetplan train`` trusts enough to write back into the profile store.

A prediction is only as steady as the figures behind it: write-backs of short runs on a busy
machine moved one U-Net dp plan's prediction to 54, 137, 248 and 73 ms over four runs, and a
GPU rank timed by the host clock wrote gpt2's blocks at half what ``hetplan profile``
measured on the same H100 (issue 24).
"""

from __future__ import annotations

from hetplan.cluster.spec import Cluster
from hetplan.plan.staleness import is_asynchronous
from hetplan.profile.provenance import step_spread
from hetplan.run.measurement.measure import Measurement, RankFigures

MIN_TIMED_STEPS = 5
"""Fewest timed steps written back: a median of 5 still ignores the 2 slowest steps (a garbage
collection, a page-fault storm), and numpy's p10/p90 of fewer than 5 points are little more
than their minimum and maximum, so the spread below could not be judged."""

MAX_STEP_SPREAD = 1.35
"""Largest p90/p10 over the timed steps (:func:`run_spread`) written back. Measured on the
2-core development machine, gpt-tiny 1f1b on examples/clusters/local-cpu.yaml, 30 timed steps
after 5 warm-up, the largest per-rank compute spread of a run: 1.06-1.36 in 11 runs whose
per-rank medians agreed within 10%; 1.40-1.54 in 6 runs hit by other work, whose medians were
up to 27% above those; 1.58 (iteration times) beside two CPU-bound processes, median 40% high.
The limit sits below the disturbed runs, with margin for the noise of a 30-step estimate."""

CUDA_EVENTS = "cuda events"
"""``RankFigures.timing`` of a rank whose spans are device time (see docs/run.md)."""
HOST_CLOCK = "host clock"


def run_spread(m: Measurement) -> float | None:
    """How steady what is written back was: the largest p90/p10 of a rank's compute (forward
    + backward) over the timed steps; of the iteration times for a measurement without
    per-rank spreads. The compute is what is written back: a pipeline's iterations also
    carry the jitter of its gloo messages on CPU (0.1-4 ms each, examples/clusters/
    local-cpu.yaml), p90/p10 1.26-1.37 for gpt-tiny's 1f1b in the quiet runs above."""
    ranks = [r for r in m.ranks if r.stage >= 0 and r.forward_s + r.backward_s > 0]
    spreads = [r.compute_spread for r in ranks]
    known = [s for s in spreads if s is not None]
    if ranks and len(known) == len(ranks):
        return max(known)
    return step_spread(m.iteration_s)


def run_reason(m: Measurement) -> str | None:
    """Why nothing of this run can be written back; None when something can."""
    plan = m.plan
    if m.steps < 1:
        return "the run timed no step"
    if not any(r.stage >= 0 and r.forward_s + r.backward_s > 0 for r in m.ranks):
        return "the run measured no compute time"
    if plan.tp > 1:
        return f"tp {plan.tp}: a tensor-parallel stage's time is not one device's layer costs"
    if is_asynchronous(plan):
        return "asynchronous plan: its steps do not run every micro-batch once"
    if plan.recompute:
        return "recomputation: the measured backward includes forward passes again"
    return _noise_reason(m)


def _noise_reason(m: Measurement) -> str | None:
    if m.steps < MIN_TIMED_STEPS:
        return (
            f"the run timed {m.steps} step(s); a write-back needs at least {MIN_TIMED_STEPS} "
            "(--steps) for a median that ignores a few slow steps"
        )
    spread = run_spread(m)
    if spread is None:
        return "the run's iteration times give no spread to judge it by"
    if spread > MAX_STEP_SPREAD:
        return (
            f"its step times are too unstable to trust: p90/p10 over the {m.steps} timed "
            f"steps is {spread:.2f} (limit {MAX_STEP_SPREAD}); a busy machine? train again "
            "when it is quiet, or with more --steps"
        )
    return None


def rank_reason(rank: RankFigures, cluster: Cluster) -> str | None:
    """Why this rank's stage times are not written back (None: they are)."""
    dev = cluster.device(rank.device)
    timing = getattr(rank, "timing", HOST_CLOCK)  # absent from measurements of older versions
    if dev.type.is_cpu or timing == CUDA_EVENTS:
        return None
    return (
        f"rank {rank.rank} on {rank.device} ({dev.type.name}): its spans were timed by the "
        f"{timing}, which on a GPU measures kernel launches, not their run (gpt2 on an H100: "
        "0.52/1.04 ms per block against 1.03/2.12 ms profiled)"
    )
