"""``torchrun`` command lines for plans that span several nodes (one command per node)."""

from __future__ import annotations

import shlex
from pathlib import Path

from hetplan.cluster.spec import Cluster
from hetplan.errors import InputError
from hetplan.plan.types import Plan

DEFAULT_PORT = 29500  # torchrun's default master port


def node_layout(plan: Plan, cluster: Cluster) -> list[tuple[str, int]]:
    """(node, ranks on it) in rank order. torchrun's static rendezvous numbers ranks
    ``node_rank * nproc_per_node + local_rank``, so each node must hold a contiguous run of
    the plan's devices, and every node the same number."""
    layout: list[tuple[str, int]] = []
    for dev in plan.devices:
        node = cluster.device(dev).node
        if layout and layout[-1][0] == node:
            layout[-1] = (node, layout[-1][1] + 1)
        elif any(n == node for n, _ in layout):
            raise InputError(
                f"plan devices of node {node} are not contiguous in rank order "
                f"(pipeline then stage): {', '.join(plan.devices)}"
            )
        else:
            layout.append((node, 1))
    counts = {c for _, c in layout}
    if len(counts) > 1:
        per = ", ".join(f"{n}: {c}" for n, c in layout)
        raise InputError(f"torchrun needs the same number of ranks on every node (got {per})")
    return layout


def torchrun_commands(
    plan: Plan,
    cluster: Cluster,
    *,
    plan_path: Path,
    cluster_path: Path,
    master_addr: str | None = None,
    port: int = DEFAULT_PORT,
    steps: int = 10,
    warmup: int = 3,
    out: Path | None = None,
    extra: list[str] | None = None,
) -> list[str]:
    """One ``torchrun ... -m hetplan.run.worker ...`` command per node, in node-rank order.

    ``master_addr`` defaults to the first node's name (reachable under that name from the
    others). The plan and cluster files must exist at the same paths on every node (and the
    data file, and a checkpoint directory on a shared file system). ``extra``: more worker
    options (``--data``, ``--checkpoint``, ``--resume``, ``--seed``, ``--lr``).
    """
    layout = node_layout(plan, cluster)
    host = master_addr or layout[0][0]
    worker = ["-m", "hetplan.run.worker", "--plan", str(plan_path), "--cluster", str(cluster_path)]
    worker += ["--steps", str(steps), "--warmup", str(warmup)]
    if out is not None:
        worker += ["--out", str(out)]
    worker += extra or []
    commands = []
    for rank, (_node, count) in enumerate(layout):
        args = ["torchrun", "--nnodes", str(len(layout)), "--node-rank", str(rank)]
        args += ["--nproc-per-node", str(count), "--max-restarts", "0"]
        args += ["--rdzv-backend", "static", "--rdzv-endpoint", f"{host}:{port}", *worker]
        commands.append(shlex.join(args))
    return commands
