"""Runs over several nodes: which ranks each node starts, and the command of every node.

One command per machine, the same on every machine but ``--node``:
``hetplan train PLAN --cluster C --node NAME --rdzv HOST:PORT``. Each starts its node's ranks
through torch's elastic agent; the agents meet at the c10d rendezvous ``HOST:PORT``, which the
first node of the plan (the node of rank 0) hosts. Nodes may start different numbers of ranks;
ranks are numbered by the plan, not by the order in which nodes join.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import socket
from pathlib import Path

from hetplan.cluster.spec import Cluster
from hetplan.errors import InputError
from hetplan.planspec import Plan
from hetplan.run.launch.spawn import NodeRun
from hetplan.run.setup.layout import run_devices
from hetplan.serde import to_data

DEFAULT_PORT = 29400  # torchrun's default c10d rendezvous port


def plan_nodes(plan: Plan, cluster: Cluster) -> list[str]:
    """The node of every plan rank (rank r runs plan device r)."""
    return [cluster.device(d).node for d in run_devices(plan)]


def node_order(plan: Plan, cluster: Cluster) -> list[str]:
    """The plan's nodes in the order of their first rank (the first hosts the rendezvous)."""
    return list(dict.fromkeys(plan_nodes(plan, cluster)))


def parse_endpoint(text: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); InputError naming ``--rdzv`` otherwise."""
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"--rdzv {text!r}: expected HOST:PORT (e.g. node0.example:{DEFAULT_PORT})")
    return host, int(port)


def run_id(plan: Plan, cluster: Cluster) -> str:
    """The same on every node for the same plan and cluster."""
    text = json.dumps(to_data(plan), sort_keys=True) + cluster.name
    return "hetplan-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def node_run(plan: Plan, cluster: Cluster, node: str, rdzv: str, run: str | None = None) -> NodeRun:
    """What node ``node`` starts; InputError when the plan places nothing there. ``run``: the
    run's id (default: from the plan and cluster; a scheduler's job id keeps two runs of one
    plan apart)."""
    parse_endpoint(rdzv)
    nodes = plan_nodes(plan, cluster)
    order = list(dict.fromkeys(nodes))
    if node not in order:
        known = ", ".join(order)
        raise InputError(f"--node {node!r}: the plan places no device there (its nodes: {known})")
    if node == order[0]:
        _check_local(rdzv, node)
    return NodeRun(
        nnodes=len(order),
        rdzv_endpoint=rdzv,
        run_id=run or run_id(plan, cluster),
        is_host=node == order[0],
        ranks=[r for r, n in enumerate(nodes) if n == node],
        nodes=nodes,
    )


def _check_local(rdzv: str, node: str) -> None:
    """The first node hosts the rendezvous: ``HOST`` must be one of this machine's addresses."""
    host, _ = parse_endpoint(rdzv)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
    except OSError as err:
        raise InputError(
            f"--rdzv {rdzv}: node {node}, the plan's first node, hosts the rendezvous, but "
            f"{host!r} is not an address of this machine ({err.strerror or err}); run node "
            f"{node}'s command on the machine {host} names"
        ) from None


def node_commands(
    plan: Plan,
    cluster: Cluster,
    *,
    plan_path: Path,
    cluster_path: Path,
    rdzv: str | None = None,
    options: list[str] | None = None,
) -> list[str]:
    """One ``hetplan train ... --node NAME --rdzv HOST:PORT`` per node, the first node first.

    ``rdzv`` defaults to the first node's name and port :data:`DEFAULT_PORT` (the node must be
    reachable under its name). The plan, cluster and data files must exist at the same paths on
    every node, and a checkpoint directory must be on a file system every node sees.
    """
    order = node_order(plan, cluster)
    endpoint = rdzv or f"{order[0]}:{DEFAULT_PORT}"
    parse_endpoint(endpoint)
    base = ["hetplan", "train", str(plan_path), "--cluster", str(cluster_path)]
    return [
        shlex.join([*base, "--node", node, "--rdzv", endpoint, *(options or [])]) for node in order
    ]
