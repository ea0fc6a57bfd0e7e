"""gloo's all-reduce on pinned CPU ranks: measured against ``hetplan.cost.comm`` priced from
a cluster file.

Every rank is pinned as the cluster file says (``cpus``), one thread, nothing else of ours
running. Per size, the median of ``--reps`` all-reduces of a float32 buffer over every rank,
each after a barrier, beside the price ``allreduce_time`` gives from the file (the model as
it stands) and from the file's pair links alone (no ``collective_step_latency_us`` nor
``collective_step_bandwidth_GBps``). Data
parallelism's gradient all-reduce is this call (DDP's buckets, 25 MiB each by default).

``python benchmarks/bench_gloo_allreduce.py [--cluster examples/clusters/local-cpu-4on2.yaml]
[--kb 20,1024,8192,32768] [--reps 10]``
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

from hetplan.cluster import load_cluster
from hetplan.cost.comm import allreduce_time

ROOT = Path(__file__).resolve().parent.parent


def _rank(rank: int, world: int, port: int, cpus: list[list[int]], args: object) -> None:
    kb, reps, out = args  # type: ignore[misc]
    init_rank(rank, world, port, cpus)
    for size in kb:
        buf = torch.ones(int(size * 1024) // 4)
        times = []
        for _ in range(reps):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(buf)
            times.append(time.perf_counter() - start)
        # The slowest rank's time is the collective's: every rank leaves it at about the same
        # moment, but one that entered late (after the barrier) reads less.
        gathered: list[object] = [None] * world
        dist.all_gather_object(gathered, times)
        if rank == 0:
            per_rep = [max(t) for t in zip(*gathered, strict=True)]  # type: ignore[call-overload]
            out.put((size, statistics.median(per_rep), min(per_rep)))
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default=str(ROOT / "examples/clusters/local-cpu-4on2.yaml"))
    ap.add_argument("--kb", default="20,1024,8192,32768")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    cluster = load_cluster(Path(args.cluster))
    pairs_only = uncapped(cluster)
    kb = [float(x) for x in args.kb.split(",")]
    ids = [d.id for d in cluster.devices]
    world = len(ids)
    queue = mp.get_context("spawn").Queue()
    spawn(cluster, _rank, (kb, args.reps, queue))
    print(f"{cluster.name}: {world} ranks, all-reduce, median (fastest) of {args.reps}")
    print("| KiB | measured ms | fastest ms | priced ms | pairs only ms |")
    print("|---|---|---|---|---|")
    for _ in kb:
        size, median, fastest = queue.get()
        priced = allreduce_time(size * 1024, ids, cluster)
        pairs = allreduce_time(size * 1024, ids, pairs_only)
        print(
            f"| {size:g} | {1e3 * median:.2f} | {1e3 * fastest:.2f} | {1e3 * priced:.2f} | "
            f"{1e3 * pairs:.2f} |"
        )


if __name__ == "__main__":
    main()
