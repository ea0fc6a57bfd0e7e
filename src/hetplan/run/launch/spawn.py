"""Start ranks on this machine with torch's elastic launcher and collect their results.

``launch_local`` runs torch's elastic agent (``torch.distributed.launcher.api.elastic_launch``,
the engine behind ``torchrun``) in a child process of its own session: the agent starts the
ranks, watches them (every 0.1 s) and tears them down when one fails. Running the agent in its
own session lets the caller bound the whole run and kill every process of it (agent, ranks,
forkserver) with one ``killpg``, so that no failure leaves orphans behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import pickle
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any, TypeVar

from hetplan.errors import HetplanError, InputError

J = TypeVar("J")
"""The job every rank of a launch is given (pickled: the same object in every rank)."""
R = TypeVar("R")
"""What each rank's entry returns (pickled back)."""

PEER_LOST = "peer lost"
"""Marks a rank's error that names other ranks that stopped responding (see ``_rank``)."""
STORE_ERROR_CHARS = 120  # characters of a store error kept in a one-line message
RESULT_FILE = "result.pkl"
SPEC_FILE = "spec.pkl"
LOG_FILE = "agent.log"
LOG_TAIL_CHARS = 20_000  # characters of the agent's log kept in RunError.details
KILL_WAIT_S = 10.0  # seconds to wait for killed processes to be gone
TICK_S = 0.2  # seconds between progress polls
NO_MESSAGE = "exited with code"
"""The agent's cause of a rank that died without recording its exception (torch elastic's
error file could not be written: a full disk, an ``os._exit``)."""
RUN_PREFIX = "hetplan-run-"
SOCKET_PATH_MAX = 107  # bytes of an AF_UNIX socket path on Linux (sun_path[108], NUL ended)
RANDOM_CHARS = 9  # "/" and tempfile's 8 random characters of a folder name
FORKSERVER_SUFFIX = len("/pymp-12345678/listener-12345678")  # multiprocessing's socket there
SHORT_ROOT = "/tmp"  # a short temporary directory where the usual one is too long


class RunError(HetplanError):
    """A distributed run that failed: the message names the rank and the cause (one line)."""

    def __init__(self, message: str, *, rank: int | None = None, details: str = "") -> None:
        super().__init__(message)
        self.rank = rank
        """The failed rank, where one is known."""
        self.details = details
        """Traceback of the failed rank or the tail of the launcher's log."""


@dataclass(frozen=True, kw_only=True)
class RankContext:
    """What a rank's entry function is told about itself."""

    rank: int
    world_size: int
    local_rank: int
    device: str
    """``cpu`` or ``cuda:<k>`` (from the cluster file; without one ``cuda:<local rank>``)."""
    backend: str
    """``gloo`` or ``nccl``; the default process group is initialised with it."""
    cpus: tuple[int, ...] | None = None
    """CPU cores this rank is pinned to, if any."""
    via_host: bool = False
    """A GPU rank in a job gloo carries: point-to-point tensors go through host memory."""


@dataclass(frozen=True, kw_only=True)
class LaunchSpec:
    """Everything the agent process needs (pickled into the run's temporary folder)."""

    entry: str
    world_size: int
    """Ranks started on this node."""
    payload: bytes
    """Pickled, and unpickled only in the ranks (the agent need not import its classes)."""
    cpus: list[tuple[int, ...] | None]
    """By plan rank."""
    backend: str
    rdzv_timeout_s: float
    preload: list[str] = field(default_factory=list)
    nnodes: int = 1
    rdzv_endpoint: str = "127.0.0.1:0"
    """``HOST:PORT`` of the rendezvous; port 0 (one node): the store picks a free port."""
    run_id: str | None = None
    """The same on every node of a run (None: a fresh one, one node)."""
    is_host: bool | None = None
    """Whether this node hosts the rendezvous store (None: torch decides from the host name)."""
    ranks: list[int] | None = None
    """The plan rank of each local rank (None: torch's numbering, one node)."""
    nodes: list[str] | None = None
    """The node of every plan rank, for messages."""
    devices: list[str] | None = None
    """The torch device of every plan rank (:mod:`hetplan.run.launch.placement`); None:
    ``cuda:<local
    rank>`` under NCCL, else ``cpu``."""


PR_SET_PDEATHSIG = 1  # prctl(2) option: the signal a process gets when its parent dies


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux ``prctl``; a no-op
    elsewhere). The launcher's agent and every rank call it, so that killing the ``hetplan``
    command of a node (a dead machine, a user's Ctrl-C, a scheduler's kill) takes its agent and
    ranks with it: agent after command, forkserver after agent (its pipe closes), rank after
    forkserver."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the caller's session kill still applies
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


Entry = Callable[[RankContext, J], R] | str
"""A rank's entry: a module-level function, or its ``package.module:function`` name (untyped:
for entries the caller does not import)."""


def entry_name(entry: Entry[J, R]) -> str:
    """``package.module:function`` of ``entry``, the name the ranks import it by."""
    if isinstance(entry, str):
        return entry
    name = f"{entry.__module__}:{entry.__qualname__}"
    if "<" in entry.__qualname__ or "." in entry.__qualname__:
        raise InputError(f"entry {name!r}: ranks can only import a module-level function")
    return name


def resolve_entry(entry: str) -> Any:
    """Import ``package.module:function``; InputError if it does not exist."""
    module_name, sep, attr = entry.partition(":")
    if not sep or not module_name or not attr:
        raise InputError(f"entry {entry!r}: expected 'package.module:function'")
    try:
        module = import_module(module_name)
    except ImportError as err:
        raise InputError(f"entry {entry!r}: cannot import {module_name} ({err})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise InputError(f"entry {entry!r}: {module_name} has no function {attr!r}")
    return fn


def default_backend(world_size: int) -> str:
    """nccl when every local rank can have its own GPU, gloo otherwise."""
    import torch  # noqa: PLC0415  (the agent process imports this module before torch)

    if torch.cuda.is_available() and torch.cuda.device_count() >= world_size:
        return "nccl"
    return "gloo"


@dataclass(frozen=True, kw_only=True)
class NodeRun:
    """This node's part of a run over several nodes (one command per node)."""

    nnodes: int
    rdzv_endpoint: str
    """``HOST:PORT`` of the rendezvous store, the same on every node."""
    run_id: str
    """The same on every node of the run, different between runs."""
    is_host: bool
    """This node hosts the rendezvous store (it must be the machine ``HOST`` names)."""
    ranks: list[int]
    """The plan ranks started here, by local rank."""
    nodes: list[str]
    """The node of every plan rank."""


def launch_local(
    entry: Entry[J, R],
    world_size: int,
    *,
    payload: J,
    cpus: Sequence[tuple[int, ...] | None] | None = None,
    timeout_s: float = 300.0,
    rdzv_timeout_s: float = 30.0,
    on_tick: Callable[[], None] | None = None,
    devices: list[str] | None = None,
) -> list[R]:
    """Run ``entry(ctx, payload)`` in ``world_size`` local ranks; return their results by rank.

    ``cpus[r]`` pins rank ``r`` to those cores (``os.sched_setaffinity``) with as many intra-op
    threads. ``rdzv_timeout_s`` bounds the joining of the process group (a rank that never
    joins) and is the default group's collective timeout; ``timeout_s`` bounds the whole run.
    ``on_tick`` is called every ``TICK_S`` seconds while the run goes (to show its progress);
    an exception it raises is ignored.
    Raises RunError naming the failed rank and the cause; no process of the run survives it.
    """
    if world_size < 1:
        raise InputError(f"world_size: must be >= 1 (got {world_size})")
    cpu_list: list[tuple[int, ...] | None] = list(cpus) if cpus else [None] * world_size
    if len(cpu_list) != world_size:
        raise InputError(f"cpus: {len(cpu_list)} entries for {world_size} ranks")
    _check_cpus(cpu_list)
    spec = _spec(entry_name(entry), world_size, payload, cpu_list, rdzv_timeout_s, devices)
    values: dict[int, R] = _launch(spec, timeout_s, on_tick)
    return [values[r] for r in sorted(values)]


def launch_node(
    entry: Entry[J, R],
    node: NodeRun,
    *,
    payload: J,
    cpus: Sequence[tuple[int, ...] | None] | None = None,
    timeout_s: float = 300.0,
    rdzv_timeout_s: float = 300.0,
    on_tick: Callable[[], None] | None = None,
    devices: list[str] | None = None,
) -> dict[int, R]:
    """This node's ranks of a run over ``node.nnodes`` nodes: the same command on every node
    (but the node), joined through torch's c10d rendezvous at ``node.rdzv_endpoint``. Returns
    the results of the ranks started here, by plan rank; RunError naming the failed rank and
    its node. ``rdzv_timeout_s`` also bounds how long the first node waits for the others."""
    world = len(node.nodes)
    cpu_list: list[tuple[int, ...] | None] = list(cpus) if cpus else [None] * world
    if len(cpu_list) != world:
        raise InputError(f"cpus: {len(cpu_list)} entries for {world} ranks")
    _check_cpus([cpu_list[r] for r in node.ranks])
    spec = dataclasses.replace(
        _spec(entry_name(entry), len(node.ranks), payload, cpu_list, rdzv_timeout_s, devices),
        nnodes=node.nnodes,
        rdzv_endpoint=node.rdzv_endpoint,
        run_id=node.run_id,
        is_host=node.is_host,
        ranks=list(node.ranks),
        nodes=list(node.nodes),
    )
    if not node.is_host:  # a mistyped --rdzv, a first node not started: said, bounded
        from hetplan.run.launch.commands import wait_for_rendezvous  # noqa: PLC0415 (cycle)

        wait_for_rendezvous(node, rdzv_timeout_s)
    return _launch(spec, timeout_s, on_tick)


def _spec(
    entry: str,
    nproc: int,
    payload: object,
    cpus: list[tuple[int, ...] | None],
    rdzv_timeout_s: float,
    devices: list[str] | None,
) -> LaunchSpec:
    resolve_entry(entry)  # fail here, not in every rank
    from hetplan.run.launch.placement import job_backend  # noqa: PLC0415  (the agent needs no torch)

    return LaunchSpec(
        entry=entry,
        world_size=nproc,
        payload=pickle.dumps(payload),
        cpus=cpus,
        backend=job_backend(devices) if devices else default_backend(nproc),
        devices=devices,
        rdzv_timeout_s=rdzv_timeout_s,
        preload=[m for m in [entry.partition(":")[0]] if m.startswith("hetplan.")],
    )


def _launch(
    spec: LaunchSpec, timeout_s: float, on_tick: Callable[[], None] | None
) -> dict[int, Any]:
    with tempfile.TemporaryDirectory(prefix=RUN_PREFIX, dir=_run_root()) as tmp:
        folder = Path(tmp)
        (folder / SPEC_FILE).write_bytes(pickle.dumps(spec))
        _run_agent(folder, timeout_s, on_tick)
        return _read_result(folder, spec)


def _run_root() -> str | None:
    """Where the run's folder goes: the usual temporary directory, unless the forkserver's
    socket would not fit an AF_UNIX path there (the agent's TMPDIR is the run's folder), then
    /tmp; None: the usual one."""
    longest = len(tempfile.gettempdir()) + len(RUN_PREFIX) + RANDOM_CHARS + FORKSERVER_SUFFIX
    if longest <= SOCKET_PATH_MAX or not os.access(SHORT_ROOT, os.W_OK):
        return None
    return SHORT_ROOT


def _check_cpus(cpus: list[tuple[int, ...] | None]) -> None:
    offered = os.sched_getaffinity(0)
    for rank, mine in enumerate(cpus):
        missing = sorted(set(mine or ()) - offered)
        if missing:
            raise InputError(
                f"cpus: rank {rank} is to be pinned to core(s) {missing}, but this process may "
                f"only use cores {sorted(offered)}"
            )


def _run_agent(folder: Path, timeout_s: float, on_tick: Callable[[], None] | None) -> None:
    env = dict(os.environ)
    # NCCL errors raise in the rank (2: clean up only) instead of aborting it (torch elastic's
    # default, 1), so that a rank names the peer it lost rather than dying of SIGABRT.
    env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2")
    # Ranks import the entry the way the caller does (tests, user modules).
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    # The agent's and ranks' temporary files (torch elastic's torchelastic_* logs,
    # multiprocessing's pymp-* folder) go into the run's folder, removed with it.
    env["TMPDIR"] = str(folder)
    with open(folder / LOG_FILE, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hetplan.run.launch._agent", str(folder)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        try:
            _wait(proc, timeout_s, on_tick)
        except subprocess.TimeoutExpired:
            _kill_session(proc)
            raise RunError(
                f"run exceeded its time limit of {timeout_s:g} s; every rank was killed",
                details=_log_tail(folder),
            ) from None
        finally:
            _kill_session(proc)


def _wait(
    proc: subprocess.Popen[bytes], timeout_s: float, on_tick: Callable[[], None] | None
) -> None:
    """``proc.wait(timeout=timeout_s)``, calling ``on_tick`` every ``TICK_S`` seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        try:
            proc.wait(timeout=max(0.0, min(TICK_S, remaining)))
            return
        except subprocess.TimeoutExpired:
            if remaining <= TICK_S:
                raise
        if on_tick is not None:
            # The tick only shows progress: a failure of it must not end the run (and with
            # it the ranks' work); the run's own errors are raised from its result.
            with contextlib.suppress(Exception):
                on_tick()


def _kill_session(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL every process of the agent's session (agent, ranks, forkserver) and wait until
    none is left running (SIGKILL is delivered asynchronously)."""
    deadline = time.monotonic() + KILL_WAIT_S
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    while _group_members(proc.pid) and time.monotonic() < deadline:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        time.sleep(0.02)


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``; [] where /proc is missing."""
    members = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # stat(5): state, ppid, pgrp
            members.append(int(entry.name))
    return members


def _log_tail(folder: Path) -> str:
    try:
        text = (folder / LOG_FILE).read_text(errors="replace")
    except OSError:
        return ""
    if len(text) <= LOG_TAIL_CHARS:
        return text
    tail = text[-LOG_TAIL_CHARS:]
    return tail[tail.find("\n") + 1 :]  # from a line's start, not mid-line


def _read_result(folder: Path, spec: LaunchSpec) -> dict[int, Any]:
    path = folder / RESULT_FILE
    if not path.exists():
        tail = _log_tail(folder)
        last = tail.strip().splitlines()[-1] if tail.strip() else "no output"
        raise RunError(f"launcher died without a result: {last}", details=tail)
    result = pickle.loads(path.read_bytes())
    if "values" in result:
        values: dict[int, Any] = result["values"]
        return values
    if "failures" in result:
        rank, cause, details = result["failures"][0]
        raise failure_error(rank, cause, details or _log_tail(folder), spec.nodes)
    error = str(result["error"])
    if error.startswith(f"{PEER_LOST}: "):
        raise RunError(error.removeprefix(f"{PEER_LOST}: "), details=_log_tail(folder))
    raise RunError(f"launcher failed: {error}", details=_log_tail(folder))


def failure_error(rank: int, cause: str, details: str, nodes: list[str] | None) -> RunError:
    """The one-line error of a failed rank; a rank that saw peers stop names them instead."""
    if cause.startswith(f"RuntimeError: {PEER_LOST}: "):
        return RunError(cause.removeprefix(f"RuntimeError: {PEER_LOST}: "), details=details)
    where = f" (node {nodes[rank]})" if nodes else ""
    if cause.startswith(NO_MESSAGE):  # the rank could not record its error (a full disk)
        last = last_exception(details)
        cause = f"{last} ({cause}; from the log)" if last else cause
    return RunError(f"rank {rank}{where} failed: {cause}", rank=rank, details=details)


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)(: .*)?$")


def last_exception(log: str) -> str | None:
    """The last line of ``log`` that ends a Python traceback (``OSError: [Errno 28] No space
    left on device``), None without one."""
    lines = [line.strip() for line in log.splitlines()]
    return next((line for line in reversed(lines) if _EXCEPTION_LINE.match(line)), None)
