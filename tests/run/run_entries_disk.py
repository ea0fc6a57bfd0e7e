"""Rank entries that fail as a full disk makes them fail (tests/run/test_run_disk_full.py)."""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

import torch.distributed as dist

from hetplan.run.launch.spawn import RankContext

FULL = "/dev/full"  # every write to it fails with ENOSPC, as on a full file system


def _write_to_full_disk() -> None:
    with open(FULL, "w") as f:
        f.write("x" * 65536)
        f.flush()


def _both_connected() -> None:
    """Rank 0 returns at once: without this barrier it could exit while rank 1's gloo is
    still connecting, and rank 1 fail at start-up ("Connection closed by peer"), not on the
    disk (seen once in a full run under load)."""
    dist.barrier()


def disk_full(ctx: RankContext, payload: dict[str, Any]) -> int:
    """Rank 1 writes to a full disk; its exception is recorded as usual."""
    _both_connected()
    if ctx.rank == 1:
        _write_to_full_disk()
    return ctx.rank


def disk_full_unrecorded(ctx: RankContext, payload: dict[str, Any]) -> int:
    """Rank 1 writes to a full disk and dies with the traceback only in its stderr, as when
    torch elastic's error file cannot be written either."""
    _both_connected()
    if ctx.rank == 1:
        try:
            _write_to_full_disk()
        except OSError:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
    return ctx.rank
