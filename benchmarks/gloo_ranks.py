"""Pinned gloo ranks on this machine, as a cluster file places them: the shared set-up of
``bench_gloo_allreduce.py``, ``bench_gloo_ps_collectives.py``, ``bench_fsdp_calls.py``,
``bench_tp_dispatch.py``, ``bench_allreduce_between_compute.py`` and
``bench_gloo_message_cpu.py``."""

from __future__ import annotations

import dataclasses
import os
import socket
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hetplan.cluster import Cluster


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_rank(rank: int, world: int, port: int, cpus: list[list[int]]) -> None:
    """Pin this process to its device's cores, one thread, and join the gloo group."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if cpus[rank]:
        os.sched_setaffinity(0, set(cpus[rank]))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)


def spawn(cluster: Cluster, rank_fn: Callable[..., None], payload: Any) -> None:
    """Run ``rank_fn(rank, world, port, cpus, payload)`` on one process per device."""
    world = len(cluster.devices)
    cpus = [list(d.cpus or ()) for d in cluster.devices]
    mp.start_processes(
        rank_fn, args=(world, free_port(), cpus, payload), nprocs=world, start_method="spawn"
    )


def uncapped(cluster: Cluster) -> Cluster:
    """``cluster`` priced from its pair links alone (no measured collective caps)."""
    return dataclasses.replace(cluster, collective_step_s=None, collective_bandwidth=None)


def median_step(step: Callable[[], object], steps: int, warmup: int = 3) -> float:
    """Median seconds of ``step`` over ``steps`` calls after ``warmup``, all ranks starting each
    call together (a barrier before it)."""
    times = []
    for i in range(warmup + steps):
        dist.barrier()
        start = time.perf_counter()
        step()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def report_and_leave(result: dict[str, float], out: Any) -> None:
    """Every rank's ``result``, as a list by rank, onto ``out`` (a queue) from rank 0; then
    leave the group."""
    gathered: list[dict[str, float]] = [{} for _ in range(dist.get_world_size())]
    dist.all_gather_object(gathered, result)
    if dist.get_rank() == 0:
        out.put(gathered)
    dist.destroy_process_group()
