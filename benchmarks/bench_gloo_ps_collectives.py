"""The synchronous parameter server's gloo calls on CPU ranks: measured against
``hetplan.cost.comm_gloo`` priced from a cluster file.

Every rank is pinned as the cluster file says (``cpus``), one thread. Per size (bytes per
host), the median of ``--reps`` repetitions after a barrier of:

- ``one``: one host's ``reduce`` then ``broadcast`` (rank 0 the root);
- ``seq``: every rank a host, the reduces one after another, then the broadcasts;
- ``async``: the same calls issued at once per phase and then waited, as
  ``hetplan.run.execute.ps.PsExecutor`` does (``seq / async`` is what
  ``GLOO_ASYNC_OVERLAP`` prices);
- ``all_reduce``: one all-reduce of the same per-host buffer (for scale).

Beside each, the price ``comm_gloo`` gives (``one`` and ``async``) from the file's pairs and
its ``collective_step_latency_us``, and from the pairs alone (no cap).

``python benchmarks/bench_gloo_ps_collectives.py [--cluster examples/clusters/local-cpu-4on2.yaml]
[--kb 4,256,1024] [--reps 20]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from gloo_ranks import init_rank, spawn, uncapped

from hetplan.cluster import Cluster, load_cluster
from hetplan.cost.comm_gloo import gloo_broadcast_time, gloo_ps_phases, gloo_reduce_time

ROOT = Path(__file__).resolve().parent.parent
MODES = ("one", "seq", "async", "all_reduce")


def _phase(bufs: list[torch.Tensor], mode: str) -> None:
    hosts = range(len(bufs))
    if mode == "one":
        dist.reduce(bufs[0], 0)
        dist.broadcast(bufs[0], 0)
    elif mode == "seq":
        for h in hosts:
            dist.reduce(bufs[h], h)
        for h in hosts:
            dist.broadcast(bufs[h], h)
    elif mode == "async":
        for calls in (
            [dist.reduce(bufs[h], h, async_op=True) for h in hosts],
            [dist.broadcast(bufs[h], h, async_op=True) for h in hosts],
        ):
            for work in calls:
                work.wait()  # type: ignore[union-attr]
    else:
        dist.all_reduce(bufs[0])


def _rank(rank: int, world: int, port: int, cpus: list[list[int]], args: object) -> None:
    kb, reps, out = args  # type: ignore[misc]
    init_rank(rank, world, port, cpus)
    for size in kb:
        bufs = [torch.ones(int(size * 1024) // 4) for _ in range(world)]
        times: dict[str, list[float]] = {m: [] for m in MODES}
        for _ in range(reps):
            for mode in MODES:
                dist.barrier()
                start = time.perf_counter()
                _phase(bufs, mode)
                times[mode].append(time.perf_counter() - start)
        if rank == 0:
            out.put((size, {m: statistics.median(v) for m, v in times.items()}))
    dist.destroy_process_group()


def _priced(size_bytes: float, cluster: Cluster) -> tuple[float, float]:
    ids = [d.id for d in cluster.devices]
    one = gloo_reduce_time(size_bytes, ids, cluster) + gloo_broadcast_time(size_bytes, ids, cluster)
    push, pull = gloo_ps_phases(dict.fromkeys(ids, size_bytes), ids, cluster)
    return one, push + pull


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default=str(ROOT / "examples/clusters/local-cpu-4on2.yaml"))
    ap.add_argument("--kb", default="4,256,1024")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    cluster = load_cluster(Path(args.cluster))
    pairs_only = uncapped(cluster)
    kb = [float(x) for x in args.kb.split(",")]
    world = len(cluster.devices)
    queue = mp.get_context("spawn").Queue()
    spawn(cluster, _rank, (kb, args.reps, queue))
    print(f"{cluster.name}: {world} ranks, medians of {args.reps}; priced: cap / pairs only")
    print("| KiB per host | one ms | priced | pairs | seq ms | async ms | priced | pairs "
          "| seq/async | all-reduce ms |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    overlaps = []
    for _ in kb:
        size, t = queue.get()
        one, phases = _priced(size * 1024, cluster)
        one_p, phases_p = _priced(size * 1024, pairs_only)
        overlaps.append(t["seq"] / t["async"])
        print(
            f"| {size:g} | {1e3 * t['one']:.2f} | {1e3 * one:.2f} | {1e3 * one_p:.2f} | "
            f"{1e3 * t['seq']:.2f} | {1e3 * t['async']:.2f} | {1e3 * phases:.2f} | "
            f"{1e3 * phases_p:.2f} | {overlaps[-1]:.2f} | {1e3 * t['all_reduce']:.2f} |"
        )
    print(f"seq/async: median {statistics.median(overlaps):.2f}")


if __name__ == "__main__":
    main()
