"""What one FSDP2 group costs a step on CPU ranks beyond its bytes: per group and pass, the
step time FSDP2 adds to the same model unsharded, against gloo's bare collectives of the same
size called back to back (no barrier between them, as a training step calls them).

The model is ``--groups`` small linear layers (``--width`` square, a few KB each: the bytes
cost nothing, what is left is the calls), every layer its own FSDP2 group, ZeRO-3 (gathered
again for the backward): a step makes ``2 G`` all-gathers and ``G`` reduce-scatters. Ranks are
placed as the cluster file places them (``gloo_ranks.spawn``: its cores, one thread each).
Per rank the median of ``--steps`` steps after warm-up; printed: the slowest rank's median.

    .venv/bin/python benchmarks/bench_fsdp_calls.py --cluster examples/clusters/local-cpu-4on2.yaml
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from gloo_ranks import init_rank, median_step, report_and_leave, spawn
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from hetplan.cluster import load_cluster


def _model(groups: int, width: int) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(groups)])


def _rank(rank: int, world: int, port: int, cpus: list[list[int]], payload: Any) -> None:
    warnings.filterwarnings("ignore")
    init_rank(rank, world, port, cpus)
    groups, width, steps, out = payload
    x = torch.randn(8, width)
    plain = _model(groups, width)
    sharded = _model(groups, width)
    mesh = init_device_mesh("cpu", (world,))
    for layer in sharded:
        fully_shard(layer, mesh=mesh, reshard_after_forward=True)
    fully_shard(sharded, mesh=mesh, reshard_after_forward=True)
    n = sum(p.numel() for p in plain[0].parameters()) // world * world
    shard, whole = torch.randn(n // world), torch.randn(n)

    def collectives() -> None:  # a ZeRO-3 step's calls: 2 gathers and a scatter per group
        for _ in range(groups):
            dist.all_gather_into_tensor(torch.empty(n), shard)
            dist.all_gather_into_tensor(torch.empty(n), shard)
            dist.reduce_scatter_tensor(torch.empty(n // world), whole)

    def all_reduces() -> None:  # as many all-reduces of the whole buffer
        for _ in range(3 * groups):
            dist.all_reduce(whole)

    result = {
        "plain": median_step(lambda: plain(x).sum().backward(), steps),
        "fsdp": median_step(lambda: sharded(x).sum().backward(), steps),
        "bare": median_step(collectives, steps),
        "all_reduce": median_step(all_reduces, steps),
    }
    report_and_leave(result, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", type=Path, required=True)
    ap.add_argument("--groups", type=int, default=16)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--steps", type=int, default=15)
    args = ap.parse_args()
    cluster = load_cluster(args.cluster)
    ctx = torch.multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    spawn(cluster, _rank, (args.groups, args.width, args.steps, queue))
    ranks = queue.get()
    slow = {k: max(r[k] for r in ranks) for k in ranks[0]}
    calls = 3 * args.groups
    added = slow["fsdp"] - slow["plain"]
    print(
        f"{args.cluster.name}: {len(ranks)} ranks, {args.groups} groups of {args.width}x"
        f"{args.width}: step plain {1e3 * slow['plain']:.2f} ms, FSDP2 ZeRO-3 "
        f"{1e3 * slow['fsdp']:.2f} ms (+{1e3 * added / calls:.3f} ms per collective call); "
        f"the same {calls} bare collectives {1e3 * slow['bare']:.2f} ms "
        f"({1e3 * slow['bare'] / calls:.3f} ms per call); {calls} all-reduces of the whole "
        f"{1e3 * slow['all_reduce']:.2f} ms ({1e3 * slow['all_reduce'] / calls:.3f} ms per call)"
    )


if __name__ == "__main__":
    main()
