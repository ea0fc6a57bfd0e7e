"""Runs over several nodes: which ranks each node starts, and the command of every node.

One command per machine, the same on every machine but ``--node``:
``hetplan train PLAN --cluster C --node NAME --rdzv HOST:PORT``. Each starts its node's ranks
through torch's elastic agent; the agents meet at the c10d rendezvous ``HOST:PORT``, which the
first node of the plan (the node of rank 0) hosts. Nodes may start different numbers of ranks;
ranks are numbered by the plan, not by the order in which nodes join.

Before its agent starts, a node other than the first checks that ``HOST`` resolves and waits,
saying so, until ``HOST:PORT`` accepts connections (:func:`wait_for_rendezvous`): a mistyped
``--rdzv`` or a first node not started yet is named at once, not after a silent timeout.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from hetplan.cluster.spec import Cluster
from hetplan.errors import InputError
from hetplan.planspec import Plan
from hetplan.run.launch.spawn import NodeRun, RunError
from hetplan.run.setup.layout import run_devices
from hetplan.serde import to_data

DEFAULT_PORT = 29400  # torchrun's default c10d rendezvous port
PROBE_S = 1.0
"""Seconds between two attempts to reach the rendezvous, and the most one attempt may take: a
second is noise beside a node's start-up (several seconds: torch is imported first)."""
MIN_PROBE_S = 1e-3
"""Seconds: the shortest bound given to one attempt (``socket`` takes 0 as non-blocking)."""
SAY_EVERY_S = 30.0
"""Seconds between two "still waiting" lines of a node waiting for the rendezvous: visibly
alive, not chatty."""


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


def resolves(host: str) -> bool:
    """Whether ``host`` (a name or an IP address) has an address on this machine."""
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):  # gaierror; UnicodeError: a label IDNA cannot encode
        return False
    return True


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def wait_for_rendezvous(node: NodeRun, timeout_s: float, say: Callable[[str], None] = _say) -> None:
    """On a node other than the first, before its agent starts: InputError at once when the
    rendezvous ``HOST`` does not resolve; else wait until ``HOST:PORT`` accepts connections (the
    first node's agent has opened its store), saying so on ``say`` at the start and every
    :data:`SAY_EVERY_S`; RunError when it does not within ``timeout_s`` seconds."""
    endpoint = node.rdzv_endpoint
    host, port = parse_endpoint(endpoint)
    me, first = node.nodes[node.ranks[0]], node.nodes[0]
    _check_resolves(endpoint, me, first)
    start = time.monotonic()
    deadline, next_say = start + timeout_s, start
    while True:
        tried = time.monotonic()
        if _accepts(host, port, min(PROBE_S, deadline - tried)):
            return
        now = time.monotonic()
        if now >= deadline:
            raise RunError(
                f"node {me}: node {first}'s rendezvous at {endpoint} did not appear within "
                f"{timeout_s:g} s; start node {first}'s command first, or check --rdzv"
            )
        if now >= next_say:
            waited = "up to " if next_say == start else f"{now - start:.0f} s of "
            say(f"node {me}: waiting for node {first}'s rendezvous at {endpoint} "
                f"({waited}{timeout_s:g} s)")  # fmt: skip
            # on a fixed grid from the start: a late probe does not push every later line
            next_say = start + SAY_EVERY_S * ((now - start) // SAY_EVERY_S + 1)
        time.sleep(max(0.0, min(tried + PROBE_S, deadline) - now))


def _check_resolves(rdzv: str, node: str, first: str) -> None:
    """InputError when the rendezvous host does not resolve on ``node`` (not the first)."""
    host, _ = parse_endpoint(rdzv)
    if not resolves(host):
        raise InputError(
            f"--rdzv {rdzv}: {host!r} does not resolve on node {node}; give the address of "
            f"node {first}, the plan's first node, which hosts the rendezvous"
        )


def _accepts(host: str, port: int, timeout_s: float) -> bool:
    """Whether ``host:port`` accepts a TCP connection within ``timeout_s`` (closed at once)."""
    try:
        with socket.create_connection((host, port), timeout=max(timeout_s, MIN_PROBE_S)):
            return True
    except OSError:  # refused (nothing listens yet), unreachable, timed out
        return False


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

    ``rdzv`` defaults to the first node's ``address`` (else its name) and port
    :data:`DEFAULT_PORT`; InputError when that does not resolve here, as a pasted command
    would fail. The plan, cluster and data files must exist at the same paths on every node,
    and a checkpoint directory must be on a file system every node sees.
    """
    order = node_order(plan, cluster)
    endpoint = rdzv or default_endpoint(cluster, order[0])
    parse_endpoint(endpoint)
    base = ["hetplan", "train", str(plan_path), "--cluster", str(cluster_path)]
    return [
        shlex.join([*base, "--node", node, "--rdzv", endpoint, *(options or [])]) for node in order
    ]


def default_endpoint(cluster: Cluster, first: str) -> str:
    """``ADDRESS:PORT`` of node ``first``'s rendezvous: its ``address`` (else its name), which
    must resolve; InputError naming the node and the fix otherwise."""
    host = cluster.address(first)
    if not resolves(host):
        what, fix = (
            (f"its address {host!r}", f"correct the `address:` of node {first}")
            if first in cluster.addresses
            else ("its name", f"add `address: HOST_OR_IP` to node {first}")
        )
        raise InputError(
            f"node {first} hosts the rendezvous, but {what} does not resolve on this machine: "
            f"{fix} in the cluster file, or pass --rdzv HOST:PORT"
        )
    return f"{host}:{DEFAULT_PORT}"
