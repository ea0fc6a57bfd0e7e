"""The agent process of :func:`hetplan.run.launch.spawn.launch_local` (``python -m``; not an API).

Runs torch's elastic agent for one local node and writes the ranks' results, or the failures
with their causes, to ``result.pkl`` in the folder given as the only argument.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import pickle
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

from hetplan.run.launch.spawn import (
    PEER_LOST,
    RESULT_FILE,
    SPEC_FILE,
    STORE_ERROR_CHARS,
    LaunchSpec,
    die_with_parent,
)

MONITOR_INTERVAL_S = 0.1  # how often the agent polls its ranks (torch's default)
START_METHOD = "forkserver"  # ranks fork from one server that imported torch once
# Seconds the agent gives the other ranks of a failed run to exit, then again between their
# SIGTERM and SIGKILL. A running rank dies of SIGTERM at once; only a frozen (SIGSTOP) or
# wedged rank waits the grace out, and torch's default (30 s, see _stop_with_grace) made a
# frozen rank end the run about 50 s after it froze instead of about 20 (issue 28). Short,
# because every failure waits the first half: a rank of a failed run has nothing left to
# finish (checkpoints are published by renaming).
JOIN_GRACE_S = 0.5
SHUTDOWN_GRACE_S = 1  # the same at torch's other shutdowns; whole seconds (an int in torch)
# torch's logger that reports a failed rank with the traceback of the agent's poll (an exit
# code, already in the message; the rank's own traceback reaches RunError through its error
# file). torch's log formatter imports torch._dynamo to format any traceback: 3 s on a 2-core
# machine, spent after every failure before the run could end.
POLL_LOGGER = "torch.distributed.elastic.multiprocessing.api"


def describe_failure(failure: Any) -> tuple[str, str]:
    """(cause, traceback) of a torchelastic ProcessFailure: the exception or the signal."""
    exitcode = int(failure.exitcode)
    if exitcode < 0:
        name = failure.signal_name()
        hint = " (out of memory?)" if name == "SIGKILL" else ""
        return f"killed by signal {name}{hint}", ""
    message = failure.message
    details = ""
    if isinstance(message, dict):
        details = str(message.get("extraInfo", {}).get("py_callstack", ""))
        message = message.get("message", "")
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    if not lines or "elastic/errors.html" in lines[0]:
        return f"exited with code {exitcode}", details
    cause = lines[0]
    if cause.endswith(":") and len(lines) > 1:  # "RuntimeError:" with the text below
        cause = f"{cause} {lines[1]}"
    return cause, details


def run(spec: LaunchSpec) -> dict[str, Any]:
    # Imported here, not at the top: main() starts the forkserver before torch is loaded.
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError  # noqa: PLC0415
    from torch.distributed.elastic.rendezvous.api import RendezvousError  # noqa: PLC0415
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch  # noqa: PLC0415

    from hetplan.run.launch._rank import rank_main  # noqa: PLC0415

    config = LaunchConfig(
        min_nodes=spec.nnodes,
        max_nodes=spec.nnodes,
        nproc_per_node=spec.world_size,
        run_id=spec.run_id or uuid.uuid4().hex,
        rdzv_backend="c10d",
        rdzv_endpoint=spec.rdzv_endpoint,
        rdzv_configs=_rdzv_configs(spec),
        max_restarts=0,
        monitor_interval=MONITOR_INTERVAL_S,
        start_method=START_METHOD,
        shutdown_timeout=SHUTDOWN_GRACE_S,
    )
    _stop_with_grace()
    logging.getLogger(POLL_LOGGER).addFilter(_without_traceback)
    launcher = elastic_launch(config, rank_main)
    try:
        values = launcher(
            spec.entry, spec.payload, spec.cpus, spec.backend, spec.rdzv_timeout_s,
            spec.ranks, spec.nodes, spec.devices,
            None if spec.nodes is None else f"{spec.rdzv_endpoint}/{spec.run_id}",
        )  # fmt: skip
    except RendezvousError as err:
        if spec.nodes is None:
            raise
        # The agent's own link to the rendezvous: the first node (its host) is gone.
        first = str(err).splitlines()[0][:STORE_ERROR_CHARS] if str(err) else type(err).__name__
        return {"error": f"{PEER_LOST}: lost the rendezvous store on node {spec.nodes[0]} "
                         f"(the plan's first node): {first}"}  # fmt: skip
    except ChildFailedError as err:
        failures = []
        for rank, failure in sorted(err.failures.items()):
            cause, details = describe_failure(failure)
            plan_rank = spec.ranks[failure.local_rank] if spec.ranks is not None else int(rank)
            failures.append((plan_rank, cause, details))
        return {"failures": _root_cause_first(failures)}
    # Each rank returns (its plan rank, its result).
    return {"values": dict(values.values())}


def _stop_with_grace() -> None:
    """Have torch stop the ranks of a failed run with :data:`JOIN_GRACE_S` between SIGTERM and
    SIGKILL. The agent's poll (``MultiprocessContext._poll``) joins its ranks through
    ``torch.multiprocessing.spawn.ProcessContext.join`` without a grace period, which waits a
    hard-coded 30 s for a rank that ignores SIGTERM (a stopped one cannot act on it) before
    the SIGKILL; ``LaunchConfig.shutdown_timeout`` does not reach it. Patched in this process
    only: the agent's own, which runs nothing else."""
    # By its full name: ``torch.multiprocessing.spawn`` is also a function of the package.
    spawn = importlib.import_module("torch.multiprocessing.spawn")
    join = spawn.ProcessContext.join
    if getattr(join, "hetplan_grace", False):
        return

    def graceful_join(
        self: Any, timeout: float | None = None, grace_period: float | None = None
    ) -> Any:  # torch's signature, keywords included
        return join(self, timeout, JOIN_GRACE_S if grace_period is None else grace_period)

    graceful_join.hetplan_grace = True  # type: ignore[attr-defined]
    spawn.ProcessContext.join = graceful_join  # type: ignore[method-assign]


def _without_traceback(record: logging.LogRecord) -> bool:
    """Log ``record`` without its traceback (see :data:`POLL_LOGGER`)."""
    record.exc_info, record.exc_text = None, None
    return True


def _rdzv_configs(spec: LaunchSpec) -> dict[str, Any]:
    # join_timeout: how long the nodes wait for each other; read_timeout: how long a store
    # operation waits (torch's default, 60 s, would cut a later node's wait for the first).
    wait = int(max(1, spec.rdzv_timeout_s))
    configs: dict[str, Any] = {"timeout": wait, "read_timeout": wait}
    if spec.is_host is not None:
        configs["is_host"] = spec.is_host
    return configs


def _root_cause_first(failures: list[tuple[int, str, str]]) -> list[tuple[int, str, str]]:
    """The failure that explains the others first: a rank killed by a signal, then one naming
    silent peers, then one that lost the rendezvous store (which the agent closes when it tears
    a failed run down, so that ranks still waiting see it go), then the rest."""

    def weight(f: tuple[int, str, str]) -> int:
        cause = f[1]
        if cause.startswith("killed by signal"):
            return 0
        if "stopped responding" in cause:
            return 1
        if "lost the rendezvous store" in cause:
            return 2
        return 3

    return sorted(failures, key=weight)


def main(argv: list[str]) -> int:
    die_with_parent()
    folder = Path(argv[1])
    spec: LaunchSpec = pickle.loads((folder / SPEC_FILE).read_bytes())
    # Start the forkserver now, so that it imports torch while this process does too.
    multiprocessing.set_forkserver_preload(
        ["hetplan.run.launch._guard", "torch", "hetplan.run.launch._rank", *spec.preload]
    )
    multiprocessing.forkserver.ensure_running()
    try:
        result = run(spec)
    except BaseException as err:  # reported to the caller, which raises RunError
        result = {"error": f"{type(err).__name__}: {err}"}
    tmp = folder / (RESULT_FILE + ".tmp")
    tmp.write_bytes(pickle.dumps(result))
    tmp.replace(folder / RESULT_FILE)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip the interpreter's slow teardown (about 1 s with torch loaded): the result is
    # written, and the caller kills whatever is left of this session.
    os._exit(code)
