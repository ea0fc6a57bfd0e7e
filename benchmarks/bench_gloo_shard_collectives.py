"""gloo's all-gather and reduce-scatter against its all-reduce of the same whole buffer, on CPU
ranks: the ratios ``hetplan.predict.sharded.GLOO_ALL_GATHER_VS_ALL_REDUCE`` and
``GLOO_REDUCE_SCATTER_VS_ALL_REDUCE`` price; and ZeRO-1's parameter sync (every rank
broadcasts its ``1/W`` of the buffer, all issued at once and then waited on, as torch's
``ZeroRedundancyOptimizer`` does with ``parameters_as_bucket_view``):
``GLOO_ZERO1_BROADCASTS_VS_ALL_REDUCE``.

A ring all-gather or reduce-scatter moves half the bytes of a ring all-reduce (one phase of
two); gloo's ``all_gather_into_tensor`` and ``reduce_scatter_tensor`` (FSDP2's collectives)
take longer than its ``all_reduce`` on this machine. Each rank a process pinned to one core
(``rank % cores``, as hetplan's CPU clusters place them), one thread; per world size and size
the median of ``--reps`` calls after a barrier, the three collectives interleaved.

``python benchmarks/bench_gloo_shard_collectives.py [--worlds 2,3,4] [--mb 2.36,9.44]
[--reps 15]``
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
import warnings
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcasts")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _calls(n: int, world: int) -> dict[str, Callable[[], object]]:
    whole, shard = torch.randn(n), torch.randn(n // world)
    return {
        "all_reduce": lambda: dist.all_reduce(whole),
        "all_gather": lambda: dist.all_gather_into_tensor(torch.empty(n), shard),
        "reduce_scatter": lambda: dist.reduce_scatter_tensor(torch.empty(n // world), whole),
        "broadcasts": lambda: _broadcasts(whole, world),
    }


def _broadcasts(whole: torch.Tensor, world: int) -> None:
    """Rank r's ``1/world`` of ``whole`` from rank r to all, every one issued, then waited."""
    pieces = whole.chunk(world)
    handles = [dist.broadcast(pieces[r], src=r, async_op=True) for r in range(world)]
    for h in handles:
        h.wait()  # type: ignore[union-attr]


def _rank(rank: int, world: int, port: int, sizes: list[float], reps: int, out: object) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.sched_setaffinity(0, {rank % (os.cpu_count() or 1)})
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=FutureWarning)  # the *_tensor names, torch >= 2.4
    dist.init_process_group("gloo", rank=rank, world_size=world)
    for mb in sizes:
        n = int(mb * 1e6 / 4) // world * world
        calls = _calls(n, world)
        times: dict[str, list[float]] = {k: [] for k in KINDS}
        for _ in range(reps):
            for kind in KINDS:
                dist.barrier()
                start = time.perf_counter()
                calls[kind]()
                times[kind].append(time.perf_counter() - start)
        if rank == 0:
            out.put((world, mb, {k: statistics.median(v) for k, v in times.items()}))  # type: ignore[attr-defined]
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worlds", default="2,3,4")
    ap.add_argument("--mb", default="2.36,9.44")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    sizes = [float(x) for x in args.mb.split(",")]
    ctx = mp.get_context("spawn")
    print(
        "| ranks | MB (whole) | all-reduce ms | all-gather ms | reduce-scatter ms | broadcasts ms "
        "| AG/AR | RS/AR | BC/AR |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    ratios, casts = [], []
    for world in (int(w) for w in args.worlds.split(",")):
        queue = ctx.Queue()
        mp.start_processes(
            _rank, args=(world, _free_port(), sizes, args.reps, queue), nprocs=world,
            start_method="spawn",
        )  # fmt: skip
        for _ in sizes:
            w, mb, t = queue.get()
            ag, rs = t["all_gather"] / t["all_reduce"], t["reduce_scatter"] / t["all_reduce"]
            bc = t["broadcasts"] / t["all_reduce"]
            ratios += [ag, rs]
            casts.append(bc)
            print(
                f"| {w} | {mb} | {1e3 * t['all_reduce']:.2f} | {1e3 * t['all_gather']:.2f} | "
                f"{1e3 * t['reduce_scatter']:.2f} | {1e3 * t['broadcasts']:.2f} | {ag:.2f} | "
                f"{rs:.2f} | {bc:.2f} |"
            )
    print(
        f"AG and RS to the all-reduce: median {statistics.median(ratios):.2f}, "
        f"range {min(ratios):.2f}-{max(ratios):.2f}; broadcasts: median "
        f"{statistics.median(casts):.2f}, range {min(casts):.2f}-{max(casts):.2f}"
    )


if __name__ == "__main__":
    main()
