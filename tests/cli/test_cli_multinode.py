"""Plans over several nodes, for real on one machine: each "node" is its own
``hetplan train --node NAME --rdzv 127.0.0.1:PORT`` process (loopback), with unequal numbers
of ranks per node; a killed node ends the others within a bound, naming it."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import IO

import torch

from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.run.references.reference import reference_run
from hetplan.run.setup.model import ZooSource
from hetplan.run.train import Training, run_plan
from hetplan.serde import to_data

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ROOT / "examples" / "clusters"
EXAMPLE = ROOT / "examples" / "data" / "blobs.py"
MODEL, DATA = f"{EXAMPLE}:model", f"{EXAMPLE}:dataset"
LAYERS = ["0", "1", "2", "3", "4"]
FAILURE_BOUND_S = 60.0  # what docs/run.md promises for a dead node
START_S = 90.0  # seconds a node's command may take to start (imports torch) on a busy machine


def _plan(pipelines: list[list[str]], batch: int, strategy: str) -> Plan:
    """``pipelines``: each pipeline's devices; layers split evenly over its stages."""
    pipes = []
    for devices in pipelines:
        n = len(devices)
        cut = [round(k * len(LAYERS) / n) for k in range(n + 1)]
        stages = [
            StagePlan(layers=LAYERS[cut[k] : cut[k + 1]], devices=[devices[k]]) for k in range(n)
        ]
        pipes.append(PipelinePlan(stages=stages, batch=batch))
    return Plan(
        model=ModelRef(name=MODEL), strategy=strategy,  # type: ignore[arg-type]
        global_batch=batch * len(pipes), micro_batches=2, pipelines=pipes, optimizer="adam",
    )  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(
    plan_file: Path, cluster: str, node: str, port: int, extra: list[str], env: dict[str, str]
) -> subprocess.Popen[str]:
    cmd = [
        sys.executable, "-m", "hetplan", "train", str(plan_file), "--cluster",
        str(CLUSTERS / cluster), "--node", node, "--rdzv", f"127.0.0.1:{port}",
        "--data", DATA, *extra,
    ]  # fmt: skip
    return _popen(cmd, env)


def _popen(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["HETPLAN_TEST_RUN"] = uuid.uuid4().hex  # marks every process of the run
    return env


def _alive(marker: str) -> list[int]:
    """Live processes whose environment holds ``marker`` (any process of the run)."""
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if f"HETPLAN_TEST_RUN={marker}".encode() in (entry / "environ").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _printed_commands(plan_file: Path, cluster: str, port: int, tmp: Path) -> list[list[str]]:
    """``train --print-commands``, as a user would copy them (hetplan -> this interpreter)."""
    argv = [
        sys.executable, "-m", "hetplan", "train", str(plan_file), "--cluster",
        str(CLUSTERS / cluster), "--print-commands", "--rdzv", f"127.0.0.1:{port}",
        "--data", DATA, "--steps", "3", "--warmup", "1", "--out", str(tmp / "m.json"),
    ]  # fmt: skip
    printed = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    cmds = [shlex.split(line) for line in printed.strip().splitlines()]
    assert all(c[0] == "hetplan" for c in cmds)
    return [[sys.executable, "-m", "hetplan", *c[1:], "--json"] for c in cmds]


def _run_nodes(plan: Plan, cluster: str, nodes: list[str], tmp: Path) -> dict[str, object]:
    plan_file = tmp / "plan.json"
    plan_file.write_text(json.dumps(to_data(plan)))
    port, env = _free_port(), _env()
    cmds = _printed_commands(plan_file, cluster, port, tmp)
    assert [c[c.index("--node") + 1] for c in cmds] == nodes  # the first node first
    procs = {n: _popen(c, env) for n, c in reversed(list(zip(nodes, cmds, strict=True)))}
    results = {n: p.communicate(timeout=300) for n, p in procs.items()}
    for n, p in procs.items():
        assert p.returncode == 0, (n, results[n][1][-3000:])
    for n in nodes[1:]:
        assert f"node {nodes[0]} writes the measurement" in results[n][0]
    assert _alive(env["HETPLAN_TEST_RUN"]) == []
    data: dict[str, object] = json.loads(results[nodes[0]][0])
    return data


def _single_command_losses(plan: Plan) -> list[float]:
    raw = run_plan(
        plan, source=ZooSource(name=MODEL), steps=3, warmup=1, training=Training(data=DATA)
    )
    return [sum(r.loss[i] for r in raw if r.loss[i] is not None) for i in range(4)]


def _close(a: object, b: list[float]) -> None:
    torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=1e-5, atol=1e-6)


def test_two_nodes_two_ranks_and_one(tmp_path: Path) -> None:
    plan = _plan([["a.0", "a.1", "b.0"]], 16, "gpipe")
    data = _run_nodes(plan, "loopback-2node.yaml", ["a", "b"], tmp_path)
    _close(data["losses"], _single_command_losses(plan))
    ref, _ = reference_run(plan, ZooSource(name=MODEL), steps=4, data=DATA)
    _close(data["losses"], ref)
    assert [r["device"] for r in data["ranks"]] == ["a.0", "a.1", "b.0"]  # type: ignore[attr-defined]
    lines = Path(str(data["step_log"])).read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [0, 1, 2, 3]  # every rank's, on node a


def test_three_nodes_hybrid_across_them(tmp_path: Path) -> None:
    plan = _plan([["a.0", "a.1"], ["b.0", "c.0"]], 8, "hybrid")
    data = _run_nodes(plan, "loopback-3node.yaml", ["a", "b", "c"], tmp_path)
    _close(data["losses"], _single_command_losses(plan))


def _long_run(tmp: Path, port: int, env: dict[str, str]) -> tuple[subprocess.Popen[str], ...]:
    plan_file = tmp / "plan.json"
    plan_file.write_text(json.dumps(to_data(_plan([["a.0", "a.1", "b.0"]], 16, "gpipe"))))
    extra = ["--steps", "100000", "--checkpoint", str(tmp / "ck"), "--checkpoint-every", "2"]
    extra += ["--out", str(tmp / "m.json"), "--timeout", "240"]
    b = _start(plan_file, "loopback-2node.yaml", "b", port, extra, env)
    a = _start(plan_file, "loopback-2node.yaml", "a", port, extra, env)
    deadline = time.monotonic() + 120
    while not (tmp / "ck" / "latest").exists():  # training is under way on both nodes
        assert a.poll() is None and b.poll() is None
        assert time.monotonic() < deadline
        time.sleep(0.2)
    return a, b


def test_a_killed_node_ends_the_others_naming_it(tmp_path: Path) -> None:
    port, env = _free_port(), _env()
    a, b = _long_run(tmp_path, port, env)
    os.killpg(b.pid, signal.SIGKILL)  # node b's command and, with it, its ranks
    killed = time.monotonic()
    _, err = a.communicate(timeout=FAILURE_BOUND_S + 30)
    took = time.monotonic() - killed
    b.wait()
    assert a.returncode == 2
    assert took < FAILURE_BOUND_S, took
    last = err.strip().splitlines()[-1]
    assert last.startswith("hetplan: error: rank 2 (node b)"), last
    # One line for the user: the failure, the steps kept and where the traceback went.
    steps = tmp_path / "m.steps.jsonl"
    assert "; kept " in last and f"measured steps in {steps}" in last, last
    assert steps.read_text().count("\n") >= 2
    time.sleep(1.0)  # SIGKILL is delivered asynchronously
    assert _alive(env["HETPLAN_TEST_RUN"]) == []


def test_a_killed_first_node_is_named_by_the_others(tmp_path: Path) -> None:
    port, env = _free_port(), _env()
    a, b = _long_run(tmp_path, port, env)
    os.killpg(a.pid, signal.SIGKILL)  # the node hosting the rendezvous
    killed = time.monotonic()
    _, err = b.communicate(timeout=FAILURE_BOUND_S + 30)
    took = time.monotonic() - killed
    a.wait()
    assert b.returncode == 2 and took < FAILURE_BOUND_S, (took, err[-2000:])
    assert "node a" in err.strip().splitlines()[-1], err[-2000:]
    time.sleep(1.0)
    assert _alive(env["HETPLAN_TEST_RUN"]) == []


def test_nodes_started_with_different_options_are_refused(tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(to_data(_plan([["a.0", "a.1", "b.0"]], 16, "gpipe"))))
    port, env = _free_port(), _env()
    b = _start(plan_file, "loopback-2node.yaml", "b", port, ["--steps", "4"], env)
    a = _start(plan_file, "loopback-2node.yaml", "a", port, ["--steps", "3"], env)
    out = {n: p.communicate(timeout=120) for n, p in (("a", a), ("b", b))}
    for n, p in (("a", a), ("b", b)):
        assert p.returncode == 2, out[n]
        assert "started with other options than node a" in out[n][1], out[n][1][-2000:]
    assert _alive(env["HETPLAN_TEST_RUN"]) == []


def _two_node_plan(tmp: Path) -> Path:
    plan_file = tmp / "plan.json"
    plan_file.write_text(json.dumps(to_data(_plan([["a.0", "a.1", "b.0"]], 16, "gpipe"))))
    return plan_file


def _hetplan(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "hetplan", *args]
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def test_printed_commands_meet_at_the_first_nodes_address(tmp_path: Path) -> None:
    plan_file = _two_node_plan(tmp_path)
    cluster = CLUSTERS / "loopback-2node.yaml"
    done = _hetplan("train", str(plan_file), "--cluster", str(cluster), "--print-commands")
    assert done.returncode == 0, done.stderr
    cmds = [shlex.split(line) for line in done.stdout.strip().splitlines()]
    assert [c[c.index("--rdzv") + 1] for c in cmds] == ["127.0.0.1:29400"] * 2
    # Without addresses, the first node's name ("a") does not resolve: refused, nothing printed.
    bare = tmp_path / "bare.yaml"
    bare.write_text("".join(x for x in cluster.read_text().splitlines(True) if "address:" not in x))
    done = _hetplan("train", str(plan_file), "--cluster", str(bare), "--print-commands")
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.strip().splitlines() == [
        "hetplan: error: node a hosts the rendezvous, but its name does not resolve on this "
        "machine: add `address: HOST_OR_IP` to node a in the cluster file, or pass --rdzv "
        "HOST:PORT"
    ]


def test_a_node_given_an_unresolvable_rdzv_host_is_refused_at_once(tmp_path: Path) -> None:
    plan_file, env = _two_node_plan(tmp_path), _env()
    cmd = [
        sys.executable, "-m", "hetplan", "train", str(plan_file), "--cluster",
        str(CLUSTERS / "loopback-2node.yaml"), "--node", "b", "--rdzv", "a.invalid:29400",
    ]  # fmt: skip
    _, err = _popen(cmd, env).communicate(timeout=START_S)
    assert err.strip().splitlines() == [
        "hetplan: error: --rdzv a.invalid:29400: 'a.invalid' does not resolve on node b; give "
        "the address of node a, the plan's first node, which hosts the rendezvous"
    ]
    assert _alive(env["HETPLAN_TEST_RUN"]) == []


def test_a_node_waits_visibly_for_a_late_first_node(tmp_path: Path) -> None:
    plan_file, port, env = _two_node_plan(tmp_path), _free_port(), _env()
    extra = ["--steps", "2", "--warmup", "0", "--out", str(tmp_path / "m.json")]
    b = _start(plan_file, "loopback-2node.yaml", "b", port, extra, env)
    said: list[str] = []

    def read(stream: IO[str]) -> None:  # node b's stderr, line by line as it comes
        for line in stream:
            said.append(line)

    assert b.stderr is not None and b.stdout is not None
    reader = threading.Thread(target=read, args=(b.stderr,), daemon=True)
    reader.start()
    waiting = f"node b: waiting for node a's rendezvous at 127.0.0.1:{port} (up to 300 s)\n"
    deadline = time.monotonic() + START_S
    while waiting not in said:  # node b says it waits, and keeps waiting
        assert b.poll() is None and time.monotonic() < deadline, said
        time.sleep(0.2)
    a = _start(plan_file, "loopback-2node.yaml", "a", port, extra, env)
    _, err = a.communicate(timeout=300)
    assert a.returncode == 0, err[-3000:]
    assert b.wait(timeout=60) == 0, said
    assert "node a writes the measurement" in b.stdout.read()
    assert _alive(env["HETPLAN_TEST_RUN"]) == []
