"""The function every rank runs first (started by torch's elastic agent; not an API).

Pins the process, initialises the default process group with a bounded timeout, then calls
the entry function with a :class:`~hetplan.run.launch.RankContext`.
"""

from __future__ import annotations

import os
import pickle
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from hetplan.run.launch import RankContext, resolve_entry

PEER_LOSS_GRACE_S = 3.0  # seconds; >> the agent's 0.1 s monitor interval
# Substrings of gloo / NCCL / c10d errors raised when the other end of a connection vanished.
PEER_LOSS_MARKERS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Read error",
    "Broken pipe",
    "remote process exited",
    "NCCL communicator was aborted",
)


def rank_main(
    entry: str,
    payload: bytes | dict[str, Any],
    cpus: list[tuple[int, ...] | None],
    backend: str,
    rdzv_timeout_s: float,
) -> Any:
    """``payload``: the entry's payload, or its pickle (as :func:`launch_local` sends it)."""
    if isinstance(payload, bytes):
        payload = pickle.loads(payload)
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    mine = cpus[rank] if rank < len(cpus) else None
    if mine:
        os.sched_setaffinity(0, mine)
        torch.set_num_threads(len(mine))
    else:  # share this node's cores between its ranks instead of oversubscribing them
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // local_world))
    device = "cpu"
    if backend == "nccl":
        device = f"cuda:{local_rank}"
        torch.cuda.set_device(local_rank)
    ctx = RankContext(
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        device=device,
        backend=backend,
        cpus=tuple(mine) if mine else None,
    )
    fn = resolve_entry(entry)
    dist.init_process_group(backend, timeout=timedelta(seconds=rdzv_timeout_s))
    try:
        result = fn(ctx, payload)
    except Exception as err:
        if is_peer_loss(err):
            # A peer died under a collective. Fail a moment later, so that the agent (which
            # tears everything down within 0.1 s of the first exit) reports the peer's death,
            # the root cause, rather than this consequence.
            time.sleep(PEER_LOSS_GRACE_S)
        raise
    dist.destroy_process_group()
    return result


def is_peer_loss(err: BaseException) -> bool:
    """Whether ``err`` is a collective or point-to-point failing because a peer went away."""
    text = str(err)
    return isinstance(err, RuntimeError) and any(m in text for m in PEER_LOSS_MARKERS)
