"""Link benchmarks: point-to-point ping-pong between every pair of ranks, and allreduce.

Every rank runs :func:`link_bench_rank` under torch.distributed (gloo on CPU, NCCL on GPU,
started by :func:`hetplan.run.launch.spawn.launch_local`). Pairs are measured one at a time while
the other ranks wait at a barrier, so a pair has its link to itself. One-way time is half the
round trip. The figures are fitted by least squares:

- a pair: ``t(S) = L + S / B`` (latency ``L``, bandwidth ``B``);
- allreduce on ``W`` ranks, :data:`BACK_TO_BACK` calls timed per sample: ``T(S) = a + k S``;
  the fixed per-collective overhead is what the intercept leaves after the ring's latency
  terms, ``a - 2 (W-1) max L`` over the ring's edges (the ring model of
  :mod:`hetplan.cost.comm_collectives`). Where the intercept is *below*
  those terms, the pairs overstate a collective's step (CPU ranks sharing a core: a
  ping-pong waits for the partner's time slice, a ring's ranks all wait on their next step at
  once), and ``a / (2 (W-1))`` becomes the cluster's ``collective_step_latency_us``. Where the
  slope is *above* what the ring's slowest pair predicts, i.e. ``2 (W-1) / (W k)`` below that
  pair's bandwidth, it becomes the cluster's ``collective_step_bandwidth_GBps`` (CPU ranks over
  loopback: a collective's ranks send, receive and add at once on their own cores, a
  ping-pong's do one of them at a time).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Literal

import numpy as np
import torch
import torch.distributed as dist

from hetplan.errors import SettingError
from hetplan.profile.fit import LinearFit, Stats, fit_linear, summarize

# Default message sizes, bytes: 1 KiB to 4 MiB in steps of 16x (latency-bound to
# bandwidth-bound on Ethernet, PCIe and NVLink alike), and 32 MiB, the size of DDP's gradient
# buckets (25 MiB by default), where CPU ranks' collectives run at their slowest (gloo over
# loopback, docs/benchmarks.md); overridable with --sizes.
DEFAULT_SIZES = (2**10, 2**14, 2**18, 2**22, 2**25)
ELEMENT_BYTES = 4  # float32 elements carry the messages
BACK_TO_BACK = 4
"""All-reduces timed together per sample, issued one after another as a training step issues
its collectives: a barrier before each single call adds the ranks' skew leaving it (gloo on
this 2-core machine: one-call samples of a 1 KiB all-reduce over two cores were bimodal,
0.23 ms p10 and 2.5-3.4 ms median, 2026-11-29; back to back 1.69-1.75 ms a call,
``benchmarks/bench_fsdp_calls.py``)."""


@dataclass(frozen=True, kw_only=True)
class LinkBenchSettings:
    """What to measure."""

    sizes: tuple[int, ...] = DEFAULT_SIZES
    """Message sizes in bytes (rounded up to whole float32 elements)."""
    warmup: int = 2
    """Untimed repetitions per size (connection set-up, buffer allocation)."""
    iters: int = 10
    """Timed repetitions per size; medians are taken over these."""
    allreduce: bool = True
    statistic: Literal["median", "p10"] = "median"
    """Which statistic of the repetitions the fits go through: the median (what a run sees),
    or the 10th percentile (the link itself, with less of a busy machine's scheduling noise)."""

    def __post_init__(self) -> None:
        if not self.sizes or min(self.sizes) < 1:
            raise SettingError(f"sizes: expected positive byte counts (got {list(self.sizes)})")
        if self.warmup < 0 or self.iters < 1:
            raise SettingError(f"need warmup >= 0 and iters >= 1 (got {self.warmup}, {self.iters})")


@dataclass(frozen=True, kw_only=True)
class PairResult:
    """One pair of ranks: one-way time per size and the fitted link."""

    ranks: tuple[int, int]
    sizes: tuple[int, ...]
    one_way: tuple[Stats, ...]
    latency_s: float
    bandwidth: float
    """Bytes per second, one direction."""


@dataclass(frozen=True, kw_only=True)
class AllreduceResult:
    """Allreduce over all ranks: time per size (slowest rank), fit and overhead."""

    world_size: int
    sizes: tuple[int, ...]
    times: tuple[Stats, ...]
    fit: LinearFit
    bus_bandwidth: float | None
    """``2 (W-1) / W / k``: the per-link bandwidth the ring model needs to match the slope
    (None when the times do not grow with the size)."""
    ring_latency_s: float
    """``2 (W-1) max L`` over the ring's edges, from the pair measurements."""
    overhead_s: float
    """``max(0, a - ring_latency_s)``: fixed cost per collective call."""
    step_latency_s: float | None = None
    """``a / (2 (W-1))`` where ``a < ring_latency_s`` (the pairs overstate a step), else
    None."""
    step_bandwidth: float | None = None
    """``bus_bandwidth`` where it is below the ring's slowest pair bandwidth (the pairs
    overstate how fast a step moves its bytes), else None; bytes per second."""


@dataclass(frozen=True, kw_only=True)
class LinkReport:
    backend: str
    world_size: int
    statistic: str
    """The statistic the fits went through (``median`` or ``p10``)."""
    pairs: tuple[PairResult, ...]
    allreduce: AllreduceResult | None


def padded(size: int) -> int:
    """Bytes actually sent for ``size``: whole float32 elements."""
    return -(-size // ELEMENT_BYTES) * ELEMENT_BYTES


def all_pairs(world: int) -> list[tuple[int, int]]:
    return list(combinations(range(world), 2))


def fit_link(sizes: Sequence[int], times: Sequence[float]) -> tuple[float, float]:
    """``(latency_s, bandwidth)`` of ``t = L + S / B`` fitted to median one-way times, relative
    to each (``fit_linear``: sizes span 1 KiB-32 MiB).

    A flat fit (no size dependence measurable) has no slope; the bandwidth then comes from the
    largest message's time alone, a lower bound.
    """
    fit = fit_linear([float(s) for s in sizes], times, relative=True)
    if fit.k_s > 0:
        return fit.a_s, 1.0 / fit.k_s
    return fit.a_s, max(sizes) / max(*times, 1e-12)


def pick(stats: Stats, statistic: str) -> float:
    return stats.p10_s if statistic == "p10" else stats.median_s


def pair_result(
    ranks: tuple[int, int],
    sizes: Sequence[int],
    samples: Sequence[Sequence[float]],
    statistic: str = "median",
) -> PairResult:
    """Summarise and fit the one-way samples of a pair (``samples[i]`` for ``sizes[i]``)."""
    stats = tuple(summarize(s) for s in samples)
    latency, bandwidth = fit_link(sizes, [pick(s, statistic) for s in stats])
    return PairResult(
        ranks=ranks,
        sizes=tuple(sizes),
        one_way=stats,
        latency_s=latency,
        bandwidth=bandwidth,
    )


def ring_edges(world: int, pairs: Sequence[PairResult]) -> list[PairResult]:
    """The pairs on the ring ``0 -> 1 -> ... -> W-1 -> 0``."""
    by_ranks = {tuple(sorted(p.ranks)): p for p in pairs}
    return [by_ranks[tuple(sorted((r, (r + 1) % world)))] for r in range(world)]


def ring_latency(world: int, pairs: Sequence[PairResult]) -> float:
    """``2 (W-1) max L`` over the ring ``0 -> 1 -> ... -> W-1 -> 0``."""
    if world <= 1:
        return 0.0
    return 2 * (world - 1) * max(p.latency_s for p in ring_edges(world, pairs))


def allreduce_result(
    world: int,
    sizes: Sequence[int],
    samples: Sequence[Sequence[float]],
    pairs: Sequence[PairResult],
    statistic: str = "median",
) -> AllreduceResult:
    """Summarise allreduce samples (per size, the slowest rank's time of each repetition)."""
    stats = tuple(summarize(s) for s in samples)
    fit = fit_linear([float(s) for s in sizes], [pick(s, statistic) for s in stats], relative=True)
    ring = ring_latency(world, pairs)
    steps = 2 * (world - 1) / world
    step = max(fit.a_s, 0.0) / (2 * (world - 1)) if world > 1 and fit.a_s < ring else None
    bus = steps / fit.k_s if fit.k_s > 0 else None
    slowest = min((p.bandwidth for p in ring_edges(world, pairs)), default=None)
    return AllreduceResult(
        world_size=world,
        sizes=tuple(sizes),
        times=stats,
        fit=fit,
        bus_bandwidth=bus,
        ring_latency_s=ring,
        overhead_s=max(0.0, fit.a_s - ring),
        step_latency_s=step,
        step_bandwidth=bus if bus is not None and slowest is not None and bus < slowest else None,
    )


def collect(results: Sequence[dict[str, Any]], settings: LinkBenchSettings) -> LinkReport:
    """Turn the per-rank raw samples of :func:`link_bench_rank` into a :class:`LinkReport`."""
    world = len(results)
    sizes = [padded(s) for s in settings.sizes]
    pairs = []
    for a, b in all_pairs(world):
        raw = results[a]["p2p"][f"{a}-{b}"]
        samples = [raw[str(s)] for s in sizes]
        pairs.append(pair_result((a, b), sizes, samples, settings.statistic))
    allreduce = None
    if settings.allreduce and world > 1:
        per_size: list[list[float]] = []
        for s in sizes:
            # Repetition i ends when the slowest rank is done with it.
            rows = np.array([r["allreduce"][str(s)] for r in results], dtype=float)
            per_size.append(rows.max(axis=0).tolist())
        allreduce = allreduce_result(world, sizes, per_size, pairs, settings.statistic)
    return LinkReport(
        backend=str(results[0]["backend"]),
        world_size=world,
        statistic=settings.statistic,
        pairs=tuple(pairs),
        allreduce=allreduce,
    )


def link_bench_rank(ctx: Any, payload: dict[str, Any]) -> dict[str, Any]:
    """Per-rank entry (``hetplan.profile.links:link_bench_rank``) for ``launch_local``.

    ``payload``: ``sizes`` (bytes), ``warmup``, ``iters``, ``allreduce`` (bool). Returns raw
    one-way times for the pairs this rank leads (``"a-b"`` with ``a`` its rank) and its own
    allreduce times, keyed by padded size as a string.
    """
    device = torch.device(ctx.device)

    def sync() -> None:  # NCCL calls return before the transfer is done
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    sizes = [padded(int(s)) for s in payload["sizes"]]
    warmup, iters = int(payload["warmup"]), int(payload["iters"])
    rank, world = dist.get_rank(), dist.get_world_size()
    p2p: dict[str, dict[str, list[float]]] = {}
    for a, b in all_pairs(world):
        dist.barrier()
        if rank not in (a, b):
            continue
        peer = b if rank == a else a
        times: dict[str, list[float]] = {}
        for size in sizes:
            buf = torch.zeros(size // ELEMENT_BYTES, dtype=torch.float32, device=device)
            samples = []
            for i in range(warmup + iters):
                sync()
                t0 = time.perf_counter()
                if rank == a:
                    dist.send(buf, peer)
                    dist.recv(buf, peer)
                else:
                    dist.recv(buf, peer)
                    dist.send(buf, peer)
                sync()
                if i >= warmup:
                    samples.append((time.perf_counter() - t0) / 2)
            times[str(size)] = samples
        if rank == a:
            p2p[f"{a}-{b}"] = times
    allreduce: dict[str, list[float]] = {}
    if payload["allreduce"] and world > 1:
        for size in sizes:
            buf = torch.ones(size // ELEMENT_BYTES, dtype=torch.float32, device=device)
            allreduce[str(size)] = _allreduce_samples(buf, warmup, iters, sync)
    dist.barrier()
    return {"rank": rank, "backend": ctx.backend, "p2p": p2p, "allreduce": allreduce}


def _allreduce_samples(
    buf: torch.Tensor, warmup: int, iters: int, sync: Callable[[], None]
) -> list[float]:
    """Seconds per all-reduce of ``buf``, each sample :data:`BACK_TO_BACK` calls after a
    barrier."""
    samples = []
    for i in range(warmup + iters):
        dist.barrier()
        sync()
        t0 = time.perf_counter()
        for _ in range(BACK_TO_BACK):
            dist.all_reduce(buf)
        sync()
        if i >= warmup:
            samples.append((time.perf_counter() - t0) / BACK_TO_BACK)
    return samples
