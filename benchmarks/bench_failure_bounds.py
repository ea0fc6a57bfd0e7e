"""How long a failing start or run takes to be reported (issue 28), each case measured for real.

Run: ``.venv/bin/python benchmarks/bench_failure_bounds.py [--repeat N] [--rdzv-timeout S]``.
Prints a markdown table, one row per case:

- **absurd cluster**: ``hetplan plan --model gpt-tiny --batch 8 --cluster FILE`` where FILE has
  ``count: 1000000000000``, a fresh process: wall time and peak RSS (``os.wait4``: this child's
  own ``ru_maxrss``), next to ``hetplan --version`` (the start-up floor) and the refusal alone
  (``load_cluster`` in this process). Target: refused in under 1 s without filling memory.
- **unresolvable --rdzv host**: ``hetplan train ... --node b --rdzv a.invalid:29400`` (node b
  is not the first node of the plan), a fresh process: wall time to its one line and exit 2.
- **missing rendezvous**: ``launch_node`` as node b against a port of 127.0.0.1 nobody
  listens on, rendezvous timeout S: seconds to the RunError. Target: S plus about a second.
- **frozen rank**: ``launch_local`` of 3 CPU ranks where rank 1 stops itself (SIGSTOP): seconds
  from the freeze (the pid file it writes just before) and from the launch to the RunError
  naming it. Target: under 30 s from the freeze.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from hetplan.errors import InputError
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.run.launch.spawn import NodeRun, RankContext, RunError, launch_local, launch_node
from hetplan.serde import to_data

ROOT = Path(__file__).resolve().parents[1]
HETPLAN = [sys.executable, "-m", "hetplan"]
LOOPBACK = ROOT / "examples" / "clusters" / "loopback-2node.yaml"
EXAMPLE = ROOT / "examples" / "data" / "blobs.py"
ENTRY = f"{Path(__file__).stem}:sigstop_on"  # the ranks import this file by its name
FROZEN_RANK = 1
FROZEN_WORLD = 3
IDLE_S = 120.0  # seconds the healthy ranks wait: far beyond the bound measured
RUN_LIMIT_S = 180.0  # seconds: a frozen-rank run that has not ended by then is reported as such
ABSURD_COUNT = 1_000_000_000_000  # the typo of issue 28
KIB = 1024  # ru_maxrss is in KiB on Linux
FROZEN_TARGET_S = 30.0  # issue 28: a frozen rank ends the run within this, from the freeze
REFUSAL_TARGET_S = 1.0  # issue 28: an absurd cluster file is refused within this


def sigstop_on(ctx: RankContext, payload: dict[str, Any]) -> None:
    """Rank ``FROZEN_RANK`` writes its pid file, then stops itself; the others wait."""
    (Path(payload["pid_dir"]) / f"{ctx.rank}.pid").write_text(str(os.getpid()))
    if ctx.rank == FROZEN_RANK:
        os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(IDLE_S)


def process(argv: list[str]) -> tuple[float, float, int, str]:
    """(wall seconds, peak RSS MiB, exit status, last stderr line) of ``argv``, a new process."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
    return wall, usage.ru_maxrss / KIB, child.returncode, lines[-1] if lines else ""


def timed(fn: Callable[[], object]) -> tuple[float, str]:
    """(seconds, the one-line error) of ``fn``, which must fail with a HetplanError."""
    start = time.perf_counter()
    try:
        fn()
    except (InputError, RunError) as err:
        return time.perf_counter() - start, str(err)
    raise SystemExit(f"{fn} did not fail")


def absurd_cluster(folder: Path, repeat: int) -> list[str]:
    from hetplan.cluster import load_cluster  # noqa: PLC0415 (timed below, imported first)

    path = folder / "absurd.yaml"
    path.write_text(
        f"name: absurd\nnodes:\n  - name: n\n    devices: [{{type: cpu, count: {ABSURD_COUNT}}}]\n"
        "    link: {type: shm}\n"
    )
    plan = [*HETPLAN, "plan", "--model", "gpt-tiny", "--batch", "8", "--cluster", str(path)]
    runs = [process(plan) for _ in range(repeat)]
    floor = [process([*HETPLAN, "--version"]) for _ in range(repeat)]
    alone, _ = timed(lambda: load_cluster(path))
    wall, rss = statistics.median(r[0] for r in runs), max(r[1] for r in runs)
    ok = "yes" if alone < REFUSAL_TARGET_S and runs[0][2] == 2 else "no"
    return [
        f"| absurd cluster (`count: {ABSURD_COUNT:,}`): `plan` | {wall:.2f} s wall, "
        f"{rss:.0f} MiB peak; the refusal alone {1e3 * alone:.1f} ms | exit {runs[0][2]}: "
        f"{_code(runs[0][3])} | refusal {ok} |",
        f"| reference: `hetplan --version` | {statistics.median(f[0] for f in floor):.2f} s wall,"
        f" {max(f[1] for f in floor):.0f} MiB peak | - | - |",
    ]


def two_node_plan(folder: Path) -> Path:
    """A 3-stage GPipe plan over loopback-2node: a.0, a.1, then b.0 (node b is not first)."""
    stages = [
        StagePlan(layers=layers, devices=[device])
        for layers, device in ((["0", "1"], "a.0"), (["2", "3"], "a.1"), (["4"], "b.0"))
    ]
    plan = Plan(
        model=ModelRef(name=f"{EXAMPLE}:model"), strategy="gpipe", global_batch=16,
        micro_batches=2, pipelines=[PipelinePlan(stages=stages, batch=16)], optimizer="adam",
    )  # fmt: skip
    path = folder / "plan.json"
    path.write_text(json.dumps(to_data(plan)))
    return path


def unresolvable_host(folder: Path) -> list[str]:
    """Node b given a host that does not resolve, next to the same command refused where its
    ``--rdzv`` is parsed (the command's floor: start-up, plan and cluster loaded)."""
    rows = []
    for label, rdzv in (("unresolvable `--rdzv` host", "a.invalid:29400"),
                        ("reference: `--rdzv` without a port", "a.invalid:x")):  # fmt: skip
        argv = [
            *HETPLAN, "train", str(two_node_plan(folder)), "--cluster", str(LOOPBACK), "--node",
            "b", "--rdzv", rdzv, "--data", f"{EXAMPLE}:dataset",
        ]  # fmt: skip
        wall, _, code, last = process(argv)
        rows.append(f"| {label}, node b | {wall:.2f} s wall | exit {code}: {_code(last)} | - |")
    return rows


def _code(text: str) -> str:
    """``text`` as inline code in a table cell (its own backticks made quotes)."""
    return "`" + text.replace("`", "'").replace("|", "\\|") + "`"


def missing_rendezvous(timeout_s: float) -> str:
    import torch  # noqa: F401, PLC0415 (loaded before the clock starts, as by train's checks)

    with socket.socket() as s:  # a port nobody listens on (closed again at once)
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    node = NodeRun(
        nnodes=2, rdzv_endpoint=f"127.0.0.1:{port}", run_id="bench", is_host=False, ranks=[1],
        nodes=["a", "b"],
    )  # fmt: skip
    took, message = timed(partial(launch_node, ENTRY, node, payload={}, rdzv_timeout_s=timeout_s))
    ok = "yes" if timeout_s <= took < timeout_s + 2 else "no"
    return (
        f"| missing rendezvous, node b, timeout {timeout_s:g} s | {took:.2f} s "
        f"(+{took - timeout_s:.2f}) | {_code(message)} | within timeout + 2 s: {ok} |"
    )


def frozen_rank(repeat: int) -> str:
    since_freeze, total, message = [], [], ""
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="hetplan-frozen-") as tmp:
            run = partial(launch_local, ENTRY, FROZEN_WORLD, timeout_s=RUN_LIMIT_S)
            took, message = timed(partial(run, payload={"pid_dir": tmp}))
            frozen = (Path(tmp) / f"{FROZEN_RANK}.pid").stat().st_mtime
            since_freeze.append(time.time() - frozen)
            total.append(took)
        print(f"  frozen rank: {since_freeze[-1]:.1f} s after the freeze", file=sys.stderr)
    worst = max(since_freeze)
    ok = "yes" if worst < FROZEN_TARGET_S else "no"
    return (
        f"| frozen rank (SIGSTOP), {FROZEN_WORLD} ranks, {repeat} runs | "
        f"{statistics.median(since_freeze):.1f} s after the freeze (max {worst:.1f}); "
        f"{statistics.median(total):.1f} s after the launch | {_code(message)} | "
        f"under {FROZEN_TARGET_S:g} s: {ok} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rdzv-timeout", type=float, default=10.0)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, {args.repeat} runs")
    print()
    print("| case | time | what is said | target |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="hetplan-bounds-") as tmp:
        for line in absurd_cluster(Path(tmp), args.repeat):
            print(line, flush=True)
        for line in unresolvable_host(Path(tmp)):
            print(line, flush=True)
    print(missing_rendezvous(args.rdzv_timeout), flush=True)
    print(frozen_rank(args.repeat), flush=True)


if __name__ == "__main__":
    main()
