"""Rank entries that freeze (SIGSTOP) one rank, for the launcher's failure-bound tests."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from hetplan.run.launch.spawn import RankContext

IDLE_S = 120.0  # seconds the healthy ranks wait: far beyond any bound the tests assert


def sigstop_on(ctx: RankContext, payload: dict[str, Any]) -> None:
    """Rank ``payload["bad"]`` stops itself (a frozen process: no exit, no closed socket, no
    heartbeat); the others wait, as ranks computing between collectives would."""
    folder = Path(payload["pid_dir"])
    (folder / f"{ctx.rank}.pid").write_text(f"{os.getpid()} {os.getsid(0)}")
    if ctx.rank == payload["bad"]:
        os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(IDLE_S)
