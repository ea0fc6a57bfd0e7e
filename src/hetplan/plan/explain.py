"""Plain-language reasons for a ranking: what the winner gains, where baselines lose time."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from hetplan.cluster.spec import Cluster
from hetplan.plan.staleness import is_asynchronous, staleness_of
from hetplan.planspec.strategies import spec_of
from hetplan.units import fmt_bytes, fmt_percent

if TYPE_CHECKING:
    from hetplan.plan.search import Ranked, Ranking


def reasons(ranking: Ranking, cluster: Cluster) -> list[str]:
    """Sentences explaining the winner, each carrying the numbers it rests on."""
    if not ranking.ranked:
        return []
    best = ranking.best
    out = [_versus_baselines(best, ranking), _staleness(best), _sharded(best)]
    dp = ranking.baselines.get("dp-equal")
    if dp is not None:
        wait = _dp_wait(dp, cluster)
        if wait:
            out.append(wait)
    left = _left_out(best, ranking, cluster)
    if left:
        out.append(left)
    if ranking.rejected:
        parts = ", ".join(f"{reason} ({n})" for reason, n in ranking.rejected.most_common())
        out.append(f"rejected {sum(ranking.rejected.values())} candidates: {parts}")
    if ranking.time_limited:
        out.append(
            "time limit reached: the best plan found so far, with "
            + ", ".join(ranking.time_limited)
            + " cut short (a longer --time-limit may find a better one)"
        )
    return [s for s in out if s]


def _versus_baselines(best: Ranked, ranking: Ranking) -> str:
    parts = []
    names = {"dp-equal": "data parallel (equal batch split)", "equal-pipeline": "equal-layer GPipe"}
    for key, label in names.items():
        base = ranking.baselines.get(key)
        if base is not None and base is not best:
            ratio = base.metrics.time_s / best.metrics.time_s
            parts.append(f"{ratio:.2f}x the speed of {label}{_beyond(base)}")
    if not parts:
        return f"{best.candidate.label} is the best plan"
    return f"{best.candidate.label}: " + " and ".join(parts)


def _staleness(best: Ranked) -> str:
    """For an asynchronous winner: its bound, and that only the iteration is predicted."""
    plan = best.candidate.plan
    if not is_asynchronous(plan):
        return ""
    bound = staleness_of(plan)
    its = "iteration" if bound == 1 else "iterations"
    stale = "without a bound" if bound is None else f"by up to {bound} {its}"
    return (
        f"{best.candidate.label} is asynchronous: weights may be stale {stale}; the "
        "prediction is of iteration time only, the iterations needed to converge under "
        "staleness are not modelled (without --asynchronous, only synchronous plans are made)"
    )


def _sharded(best: Ranked) -> str:
    """For a sharded winner: the state each device holds, a 1/n share of a replica's."""
    plan = best.candidate.plan
    if not spec_of(plan).shards_state:
        return ""
    n = len(plan.pipelines)
    if spec_of(plan).shards_optimizer_only(plan):
        state = max(d.memory.get("optimizer", 0.0) for d in best.prediction.devices)
        return (
            f"{best.candidate.label}: each device holds about 1/{n} of the optimizer state "
            f"({fmt_bytes(state)} at most) beside whole weights and gradients, steps the "
            "parameters it owns and broadcasts them (ZeRO-1, torch's ZeroRedundancyOptimizer)"
        )
    held = max(
        sum(d.memory.get(k, 0.0) for k in ("weights", "grads", "optimizer"))
        for d in best.prediction.devices
    )
    return (
        f"{best.candidate.label}: each device holds about 1/{n} of the weights, gradients and "
        f"optimizer state ({fmt_bytes(held)} at most) and gathers each layer as it runs it "
        "(FSDP2, shards padded to equal sizes: the memory follows the largest share)"
    )


def _dp_wait(dp: Ranked, cluster: Cluster) -> str:
    busy: dict[str, list[float]] = defaultdict(list)
    for dev in dp.prediction.devices:
        busy[cluster.device(dev.id).type.name].append(dev.busy_fraction)
    if len(busy) < 2:
        return ""
    mean = {t: sum(v) / len(v) for t, v in busy.items()}
    slow = max(mean, key=mean.__getitem__)
    fast = min(mean, key=mean.__getitem__)
    idle = 1.0 - mean[fast]
    return (
        f"data parallel with an equal batch split waits on the {slow}s: "
        f"the {fast}s idle {fmt_percent(idle)} of each step"
    )


def _left_out(best: Ranked, ranking: Ranking, cluster: Cluster) -> str:
    used = set(best.candidate.plan.devices)
    unused = [d for d in cluster.devices if d.id not in used]
    if not unused:
        return ""
    ids = {d.id for d in unused}
    bigger = [r for r in ranking.ranked if used < set(r.candidate.plan.devices)]
    if not bigger:
        return f"{_describe(cluster, ids)} left out: {_why_none(len(used), ranking)}"
    # Prefer a plan that adds every left-out device; else the best that adds some.
    full = [r for r in bigger if ids <= set(r.candidate.plan.devices)]
    alt = min(full or bigger, key=lambda r: r.score)
    added = set(alt.candidate.plan.devices) - used
    gain = alt.metrics.samples_per_s / best.metrics.samples_per_s - 1.0
    energy = alt.metrics.energy_j / best.metrics.energy_j - 1.0
    return (
        f"{_describe(cluster, ids)} left out: adding {_describe(cluster, added)} "
        f"({alt.candidate.label}) changes throughput by {fmt_percent(gain, sign=True)} "
        f"and energy per step by {fmt_percent(energy, sign=True)}"
    )


def outside_text(r: Ranked) -> str:
    """``outside the limits: 3 devices > limit 2`` for a plan that breaks a limit."""
    return "outside the limits: " + "; ".join(r.outside_limits)


def _beyond(base: Ranked) -> str:
    """``, outside the limits (3 devices > limit 2)`` for a baseline that breaks a limit."""
    if not base.outside_limits:
        return ""
    return f", outside the limits ({'; '.join(base.outside_limits)})"


def _why_none(used: int, ranking: Ranking) -> str:
    """Why no ranked plan adds the devices the winner leaves out: the device limit the winner
    already reaches, the limits that rejected candidates, or that none was feasible."""
    cap = ranking.limits.max_devices
    if cap is not None and used >= cap:
        return f"--max-devices {cap}"
    broken = [k for k in ranking.rejected if k.startswith("limit: ")]
    if broken:
        return f"no plan using them was found within the limits ({', '.join(broken)})"
    return "no feasible plan using them was found"


def _describe(cluster: Cluster, ids: set[str]) -> str:
    """``T4 x2, JetsonTX1`` for a set of device ids."""
    counts: dict[str, int] = defaultdict(int)
    for d in cluster.devices:
        if d.id in ids:
            counts[d.type.name] += 1
    return ", ".join(f"{t} x{n}" if n > 1 else t for t, n in sorted(counts.items()))
