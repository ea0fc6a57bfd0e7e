"""CPU time a gloo point-to-point message costs its two ranks, beside its wall time.

The asynchronous parameter server's runtime (:mod:`hetplan.run.execute.ps_async`) moves each
push and each pull reply as one gloo message between CPU ranks, received by a side thread
and handed over through a queue. Every message costs CPU on both ends beyond its bytes: the
sender's and receiver's gloo TCP loop threads (epoll wake-ups, syscalls) and the Python
threads that wake to take it. On ranks that share a core, that time is taken from the
core-mates' compute. This measures it: two ranks, pinned as ``--cluster`` places its first two
devices, play ``--n`` round trips of a ``--kb`` KiB tensor, rank 1 receiving in a side thread
as the server does (``--main`` in the main thread); each rank reads its process's CPU time
(every thread: ``resource.getrusage``) around the loop. Prints per message the wall time of a
round trip / 2 and the CPU seconds of both ranks together.

``python benchmarks/bench_gloo_message_cpu.py [--cluster examples/clusters/local-cpu.yaml]
[--kb 1,20,256] [--n 400] [--main]``
"""

from __future__ import annotations

import argparse
import queue
import resource
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from gloo_ranks import init_rank, spawn

from hetplan.cluster import load_cluster

ROOT = Path(__file__).resolve().parent.parent


def _cpu_s() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def _echo(n: int, kb: float, side: bool) -> None:
    """Rank 1: take each message (in a side thread, or here) and send it back."""
    buf = torch.empty(int(kb * 256))
    if not side:
        for _ in range(n):
            dist.recv(buf, src=0)
            dist.send(buf, dst=0)
        return
    inbox: queue.Queue[torch.Tensor] = queue.Queue()

    def receive() -> None:
        for _ in range(n):
            got = torch.empty(int(kb * 256))
            dist.recv(got, src=0)
            inbox.put(got)

    t = threading.Thread(target=receive)
    t.start()
    for _ in range(n):
        dist.send(inbox.get(), dst=0)
    t.join()


def _rank(rank: int, world: int, port: int, cpus: list[list[int]], payload: Any) -> None:
    n, sizes, side, out = payload
    init_rank(rank, world, port, cpus)
    rows = []
    for kb in sizes:
        dist.barrier()
        wall, cpu = time.perf_counter(), _cpu_s()
        if rank >= 2:  # the cluster's other devices: idle
            pass
        elif rank == 0:
            buf = torch.ones(int(kb * 256))
            for _ in range(n):
                dist.send(buf, dst=1)
                dist.recv(buf, src=1)
        else:
            _echo(n, kb, side)
        rows.append((kb, time.perf_counter() - wall, _cpu_s() - cpu))
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, rows)
    if rank == 0:
        out.put(gathered)
    dist.barrier()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default=str(ROOT / "examples/clusters/local-cpu.yaml"))
    ap.add_argument("--kb", default="1,20,256")
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--main", action="store_true", help="rank 1 receives in its main thread")
    args = ap.parse_args()
    cluster = load_cluster(Path(args.cluster))
    sizes = [float(x) for x in args.kb.split(",")]
    ctx = torch.multiprocessing.get_context("spawn")
    out = ctx.SimpleQueue()
    spawn(cluster, _rank, (args.n, sizes, not args.main, out))
    ranks = out.get()
    where = "main thread" if args.main else "side thread + queue"
    print(f"{cluster.name}: ranks 0-1, {args.n} round trips, rank 1 receives in its {where}")
    print("| KiB | wall per message us | CPU per message us (both ranks) | rank 0 | rank 1 |")
    print("|---|---|---|---|---|")
    for i, kb in enumerate(sizes):
        wall = ranks[0][i][1] / (2 * args.n)
        cpu0, cpu1 = (ranks[r][i][2] / (2 * args.n) for r in (0, 1))
        print(
            f"| {kb:g} | {1e6 * wall:.0f} | {1e6 * (cpu0 + cpu1):.0f} "
            f"| {1e6 * cpu0:.0f} | {1e6 * cpu1:.0f} |"
        )


if __name__ == "__main__":
    main()
