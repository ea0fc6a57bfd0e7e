"""The function every rank runs first (started by torch's elastic agent; not an API).

Pins the process, takes its rank in the plan (on several nodes torch's rendezvous numbers the
nodes in the order they join; hetplan numbers ranks by the plan, so that rank ``r`` is the
plan's device ``r`` whichever node joined first), initialises the default process group with a
bounded timeout, starts the heartbeat (:class:`Heartbeat`), then calls the entry function with
a :class:`~hetplan.run.launch.spawn.RankContext`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import pickle
import threading
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from hetplan.run.launch.spawn import (
    PEER_LOST,
    STORE_ERROR_CHARS,
    RankContext,
    die_with_parent,
    resolve_entry,
)

PEER_LOSS_GRACE_S = 3.0  # seconds; >> the agent's 0.1 s monitor interval and > HEARTBEAT_S
HEARTBEAT_S = 1.0  # seconds between a rank's heartbeats (a counter in the rendezvous store)
WATCH_S = 5.0  # seconds between the watchdog's looks at every rank's heartbeat
WATCH_MISSES = 3  # looks without progress before a rank counts as gone (15 s)
# Substrings of gloo / NCCL / c10d errors raised when the other end of a connection vanished.
PEER_LOSS_MARKERS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Read error",
    "Broken pipe",
    "remote process exited",
    "NCCL communicator was aborted",
)
DONE = b"done"
FAILED = b"failed"
ABORT = "abort"  # key of the message of a rank that found the run cannot go on
STORE_TIMEOUT_S = 10.0  # seconds a heartbeat store operation may take before the store is lost


class Heartbeat(threading.Thread):
    """Each rank bumps a counter in the rendezvous store every second; the watchdog compares
    every rank's counter every :data:`WATCH_S` and ends this rank, naming the silent one, when
    a counter stops for :data:`WATCH_MISSES` looks (a node that died without closing its
    connections, a frozen process; a deadlocked one keeps beating and is left to the
    collective timeout). Counters, not clocks: machines need not agree on time.
    """

    def __init__(
        self, store: Any, rank: int, world: int, nodes: list[str] | None, prefix: str = ""
    ) -> None:
        super().__init__(name="hetplan-heartbeat", daemon=True)
        self.store = dist.PrefixStore(f"hetplan/heartbeat/{prefix}", store)
        self.rank, self.world, self.nodes = rank, world, nodes
        self.halt = threading.Event()
        self._beats = 0

    def keys(self) -> list[str]:
        return [str(r) for r in range(self.world)]

    def sample(self) -> list[bytes | None]:
        """Every rank's counter now (None: not written yet)."""
        keys = self.keys()
        if self.store.check(keys):  # the usual case: one round trip
            return [bytes(v) for v in self.store.multi_get(keys)]
        present = [self.store.check([k]) for k in keys]
        got = self.store.multi_get([k for k, ok in zip(keys, present, strict=True) if ok])
        values = iter(got)
        return [bytes(next(values)) if ok else None for ok in present]

    def silent(self, before: list[bytes | None], after: list[bytes | None]) -> list[int]:
        """Ranks whose counter did not move between two samples. Excluded: ranks that finished
        or failed by themselves (they said so), and ranks not started yet (NCCL does not line
        ranks up at initialisation; a rank that never starts is the collective timeout's)."""
        return [
            r
            for r, (a, b) in enumerate(zip(before, after, strict=True))
            if r != self.rank and b is not None and a == b and b not in (DONE, FAILED)
        ]

    def start(self) -> None:
        self.store.set(str(self.rank), "0")  # present before any peer looks
        super().start()

    def describe(self, ranks: list[int]) -> str:
        where = [f"rank {r}" + (f" (node {self.nodes[r]})" if self.nodes else "") for r in ranks]
        mine = f"rank {self.rank}" + (f" on node {self.nodes[self.rank]}" if self.nodes else "")
        return f"{PEER_LOST}: {', '.join(where)} stopped responding (seen by {mine})"

    def store_lost(self, err: BaseException) -> str:
        """The message of a rank that lost the store its heartbeats live in."""
        why = str(err).splitlines()[0][:STORE_ERROR_CHARS] if str(err) else type(err).__name__
        where = f" on node {self.nodes[0]} (the plan's first node)" if self.nodes else ""
        return f"{PEER_LOST}: lost the rendezvous store{where}: {why}"

    def run(self) -> None:
        misses: dict[int, int] = {}
        last: list[bytes | None] = [None] * self.world
        next_watch = time.monotonic() + WATCH_S
        while not self.halt.wait(HEARTBEAT_S):
            try:
                self._beats += 1
                self.store.set(str(self.rank), str(self._beats))
                if time.monotonic() < next_watch:
                    continue
                next_watch = time.monotonic() + WATCH_S
                if self.store.check([ABORT]):
                    _die(f"{PEER_LOST}: {self.store.get(ABORT).decode()}")
                now = self.sample()
                stuck = set(self.silent(last, now))
                misses = {r: misses.get(r, 0) + 1 for r in stuck}
                last = now
                gone = sorted(r for r, n in misses.items() if n >= WATCH_MISSES)
            except Exception as err:  # the store's host is gone: its node died
                _die(self.store_lost(err))
            if gone:
                self.finish(FAILED)
                _die(self.describe(gone))

    def explained(self, err: Exception) -> Exception:
        """``err``, or the message of a rank that aborted the run (the cause of ``err``)."""
        try:
            if self.store.check([ABORT]):
                return RuntimeError(f"{PEER_LOST}: {self.store.get(ABORT).decode()}")
        except Exception:  # no store left: no better explanation than err
            pass
        return err

    def abort(self, message: str) -> None:
        """This rank cannot run: every rank's watchdog ends its rank with ``message``."""
        with contextlib.suppress(Exception):
            self.store.set(ABORT, message)
        self.finish(FAILED)

    def finish(self, marker: bytes = DONE) -> None:
        """Stop beating and say why (finished, or failed by itself: not a silent peer)."""
        self.halt.set()
        if threading.current_thread() is not self:
            self.join(timeout=2 * HEARTBEAT_S)
        with contextlib.suppress(Exception):  # a finished rank need not reach a dying store
            self.store.set(str(self.rank), marker)


def _die(message: str) -> None:
    """End this rank now with ``message`` as its recorded error (the agent reports it)."""
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler  # noqa: PLC0415

    try:
        raise RuntimeError(message)
    except RuntimeError as err:  # recorded with the traceback of this watchdog
        ErrorHandler().record_exception(err)
    os._exit(1)


def rank_main(
    entry: str,
    payload: object,
    cpus: list[tuple[int, ...] | None],
    backend: str,
    rdzv_timeout_s: float,
    ranks: list[int] | None = None,
    nodes: list[str] | None = None,
    devices: list[str] | None = None,
    rendezvous: str | None = None,
) -> tuple[int, Any]:
    """``payload``: the entry's payload (any picklable object; training's is a
    :class:`~hetplan.run.loop.job.TrainJob`), or its pickle (as :func:`launch_local` sends it).
    ``ranks``: the plan rank of each local rank (None: torch's ranks are the plan's);
    ``nodes``: the node of every plan rank (for messages); ``devices``: the torch device of
    every plan rank (None: ``cuda:<local rank>`` under NCCL, else ``cpu``); ``rendezvous``:
    ``HOST:PORT/run id`` of a run over several nodes (where heartbeats go). Returns (plan rank,
    result)."""
    die_with_parent()
    data = pickle.loads(payload) if isinstance(payload, bytes) else payload
    local_rank = int(os.environ["LOCAL_RANK"])
    rank = ranks[local_rank] if ranks is not None else int(os.environ["RANK"])
    os.environ["RANK"] = str(rank)  # init_process_group reads it (env://)
    world = int(os.environ["WORLD_SIZE"])
    mine = cpus[rank] if rank < len(cpus) else None
    if mine:
        os.sched_setaffinity(0, mine)
        torch.set_num_threads(len(mine))
    else:  # share this node's cores between its ranks instead of oversubscribing them
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // local_world))
    device = "cpu" if backend != "nccl" else f"cuda:{local_rank}"
    if devices is not None:
        device = devices[rank]
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    ctx = RankContext(
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        device=device,
        backend=backend,
        cpus=tuple(mine) if mine else None,
        via_host=backend == "gloo" and device.startswith("cuda"),
    )
    fn = resolve_entry(entry)
    timeout = timedelta(seconds=rdzv_timeout_s)
    if nodes is not None:  # checked before joining: a mismatch would hang init_process_group
        beat = _heartbeat(rank, world, nodes, rendezvous)
        beat.start()
        try:
            _check_same_run(beat.store, rank, world, nodes, data, rdzv_timeout_s)
        except RuntimeError as err:
            beat.abort(str(err))  # the other nodes' ranks stop waiting and say why
            raise
        try:
            dist.init_process_group(backend, timeout=timeout)
        except Exception as err:  # another node's rank aborted while this one was joining
            raise beat.explained(err) from None
    else:
        dist.init_process_group(backend, timeout=timeout)
        beat = _heartbeat(rank, world, nodes, rendezvous)
        beat.start()
    try:
        result = fn(ctx, data)
    except Exception as err:
        if is_peer_loss(err):
            err = _peer_lost(beat, err)
        err = beat.explained(err)
        beat.finish(FAILED)
        raise err from None
    beat.finish()
    dist.destroy_process_group()
    return rank, result


def _heartbeat(rank: int, world: int, nodes: list[str] | None, rendezvous: str | None) -> Heartbeat:
    """On one node, the heartbeats live in the process group's store. On several nodes, in the
    rendezvous store of the plan's first node (``rendezvous``: ``HOST:PORT/run id``): the
    workers' store is hosted by whichever node torch's rendezvous ranked first, and a
    heartbeat kept there would die with that node, unable to name it."""
    if rendezvous is None:
        return Heartbeat(dist.distributed_c10d._get_default_store(), rank, world, nodes)
    endpoint, _, run = rendezvous.partition("/")
    host, _, port = endpoint.rpartition(":")
    wait = timedelta(seconds=STORE_TIMEOUT_S)  # a lost store is found out within this
    store = dist.TCPStore(host, int(port), is_master=False, timeout=wait, wait_for_workers=False)
    return Heartbeat(store, rank, world, nodes, prefix=run)


def _check_same_run(
    store: Any, rank: int, world: int, nodes: list[str], payload: object, wait_s: float
) -> None:
    """Every node's command must run the same plan with the same options, each node once."""
    if world != len(nodes):
        raise RuntimeError(
            f"the plan has {len(nodes)} ranks but {world} processes joined the rendezvous: was a "
            "node's command started on two machines, or with another plan or cluster file?"
        )
    if store.add(f"claim/{rank}", 1) != 1:
        raise RuntimeError(
            f"rank {rank} (node {nodes[rank]}) was started twice: --node {nodes[rank]} runs on "
            "two machines"
        )
    digest = hashlib.sha256(pickle.dumps(_shared(payload))).hexdigest()
    if rank == 0:
        store.set("run-digest", digest)
        return
    store.wait(["run-digest"], timedelta(seconds=wait_s))
    if store.get("run-digest").decode() != digest:
        raise RuntimeError(
            f"node {nodes[rank]} was started with other options than node {nodes[0]} (steps, "
            "data, seed, learning rate, checkpoint or plan differ): give every node the same "
            "command but --node"
        )


def _shared(payload: object) -> object:
    """What every node's ``payload`` must agree on: all of it but its ``log_dir`` (log folders
    are per node), whether the payload is a dataclass (:class:`~hetplan.run.loop.job.TrainJob`)
    or a dict."""
    if dataclasses.is_dataclass(payload) and not isinstance(payload, type):
        if any(f.name == "log_dir" for f in dataclasses.fields(payload)):
            return dataclasses.replace(payload, log_dir=None)
        return payload
    if isinstance(payload, dict):
        return {k: v for k, v in payload.items() if k != "log_dir"}
    return payload


def _peer_lost(beat: Heartbeat, err: Exception) -> Exception:
    """A peer died under a collective. Wait a moment, so that the agent (which tears
    everything down within 0.1 s of a local rank's exit) reports a local peer's death, the
    root cause, rather than this consequence; then name the ranks whose heartbeat stopped."""
    try:
        before = beat.sample()
        time.sleep(PEER_LOSS_GRACE_S)
        gone = beat.silent(before, beat.sample())
    except Exception as store_err:  # the store went with the dead node (or the run's end)
        return RuntimeError(beat.store_lost(store_err))
    return RuntimeError(beat.describe(gone)) if gone else err


def is_peer_loss(err: BaseException) -> bool:
    """Whether ``err`` is a collective or point-to-point failing because a peer went away."""
    text = str(err)
    return isinstance(err, RuntimeError) and any(m in text for m in PEER_LOSS_MARKERS)
