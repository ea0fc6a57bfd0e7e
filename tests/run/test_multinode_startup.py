"""The start of a run over several nodes: where the rendezvous is (the first node's ``address``),
and a node other than the first that refuses an unresolvable ``--rdzv`` host at once and waits
for the first node's rendezvous visibly and within its bound (issue 28, items 1 and 2)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from hetplan.cluster import cluster_from_data, cluster_to_config, config_to_data
from hetplan.errors import InputError
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.run.launch import commands
from hetplan.run.launch.commands import node_commands, wait_for_rendezvous
from hetplan.run.launch.spawn import NodeRun, RunError, launch_node

UNRESOLVABLE = "a.invalid"  # RFC 6761: names under .invalid never resolve
BOUND_SLACK_S = 2.0  # seconds a wait may overrun its timeout: one probe, 2 busy test workers


def _cluster(**addresses: str) -> dict[str, object]:
    nodes = []
    for name in ("a", "b"):
        node: dict[str, object] = {"name": name, "devices": [{"type": "cpu"}]}
        if name in addresses:
            node["address"] = addresses[name]
        nodes.append(node)
    return {"name": "two", "nodes": nodes, "network": {"type": "10GbE"}}


def _plan() -> Plan:
    stages = [StagePlan(layers=["0"], devices=["a.0"]), StagePlan(layers=["1"], devices=["b.0"])]
    return Plan(
        model=ModelRef(name="mlp"), strategy="gpipe", global_batch=4, micro_batches=2,
        pipelines=[PipelinePlan(stages=stages, batch=4)],
    )  # fmt: skip


def _commands(data: dict[str, object], rdzv: str | None = None) -> list[str]:
    cluster = cluster_from_data(data, "c.yaml")
    return node_commands(
        _plan(), cluster, plan_path=Path("p.json"), cluster_path=Path("c.yaml"), rdzv=rdzv
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _node_b(port: int, host: str = "127.0.0.1") -> NodeRun:
    return NodeRun(
        nnodes=2, rdzv_endpoint=f"{host}:{port}", run_id="r", is_host=False, ranks=[1],
        nodes=["a", "b"],
    )  # fmt: skip


def test_address_is_validated_and_round_trips() -> None:
    cluster = cluster_from_data(_cluster(a="10.0.0.5"), "c.yaml")
    assert cluster.address("a") == "10.0.0.5" and cluster.address("b") == "b"
    assert cluster_from_data(config_to_data(cluster_to_config(cluster)), "c.yaml") == cluster
    for bad in ("", "  ", "10.0.0.5 extra"):
        with pytest.raises(InputError, match=r"c\.yaml: nodes\.0: address: expected a host name"):
            cluster_from_data(_cluster(a=bad), "c.yaml")
    with pytest.raises(InputError, match=r"nodes\.0\.address: Input should be a valid string"):
        cluster_from_data(_cluster(a=5), "c.yaml")  # type: ignore[arg-type]


def test_printed_commands_meet_at_the_first_nodes_address() -> None:
    lines = _commands(_cluster(a="127.0.0.1", b="127.0.0.2"))
    assert [line.split("--rdzv ")[1].split()[0] for line in lines] == ["127.0.0.1:29400"] * 2
    assert _commands(_cluster(), rdzv="h:1")[0].endswith(" --rdzv h:1")  # given: as given


def test_printed_commands_use_a_name_only_where_it_resolves() -> None:
    data = _cluster()
    data["nodes"][0]["name"] = "localhost"  # type: ignore[index]
    plan = _plan()
    plan.pipelines[0].stages[0].devices[0] = "localhost.0"
    cluster = cluster_from_data(data, "c.yaml")
    lines = node_commands(plan, cluster, plan_path=Path("p"), cluster_path=Path("c"))
    assert "--rdzv localhost:29400" in lines[0]
    with pytest.raises(InputError) as info:
        _commands(_cluster())
    assert str(info.value) == (
        "node a hosts the rendezvous, but its name does not resolve on this machine: add "
        "`address: HOST_OR_IP` to node a in the cluster file, or pass --rdzv HOST:PORT"
    )
    with pytest.raises(InputError, match=r"its address .a\.invalid. does not resolve on this"):
        _commands(_cluster(a=UNRESOLVABLE))


def test_an_unresolvable_rdzv_host_is_refused_at_once() -> None:
    start = time.monotonic()
    with pytest.raises(InputError) as info:  # before the agent starts: no process is started
        launch_node("run_entries:allreduce", _node_b(29400, UNRESOLVABLE), payload={})
    assert time.monotonic() - start < 10.0  # a lookup, not a wait
    assert str(info.value) == (
        "--rdzv a.invalid:29400: 'a.invalid' does not resolve on node b; give the address of "
        "node a, the plan's first node, which hosts the rendezvous"
    )


def test_the_wait_ends_when_the_first_node_listens() -> None:
    port, said = _free_port(), list[str]()
    server = socket.socket()
    server.bind(("127.0.0.1", port))

    def listen_late() -> None:
        time.sleep(1.5)
        server.listen()

    threading.Thread(target=listen_late, daemon=True).start()
    start = time.monotonic()
    try:
        wait_for_rendezvous(_node_b(port), 20.0, said.append)
    finally:
        server.close()
    assert 1.5 <= time.monotonic() - start < 1.5 + BOUND_SLACK_S
    assert said == [f"node b: waiting for node a's rendezvous at 127.0.0.1:{port} (up to 20 s)"]


def test_a_first_node_that_never_appears_ends_the_wait_in_its_bound(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(commands, "SAY_EVERY_S", 1.0)  # the repeated line, in a short test
    port, timeout_s = _free_port(), 3.0  # nobody listens on port
    start = time.monotonic()
    with pytest.raises(RunError) as info:
        launch_node("run_entries:allreduce", _node_b(port), payload={}, rdzv_timeout_s=timeout_s)
    took = time.monotonic() - start
    assert str(info.value) == (
        f"node b: node a's rendezvous at 127.0.0.1:{port} did not appear within 3 s; start "
        "node a's command first, or check --rdzv"
    )
    assert timeout_s <= took < timeout_s + BOUND_SLACK_S, took
    lines = capfd.readouterr().err.splitlines()
    assert lines[0] == f"node b: waiting for node a's rendezvous at 127.0.0.1:{port} (up to 3 s)"
    assert len(lines) >= 3 and lines[1].endswith(" s of 3 s)"), lines
