"""The tensor-bytes counter follows FSDP2's storage resizes (hetplan.run.meters.fsdp_storage):
a sharded step counts the same whether FSDP2 made its gathered buffers in it (the first
step) or earlier, and what is left at its end is a hand count of what it holds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ENTRY = Path(__file__).with_name("memcount_fsdp_entry.py")
LAYER = 256 * 256 * 4  # one 256x256 fp32 weight, bytes
TIMEOUT_S = 120


def _steps(tmp_path: Path, mode: str) -> list[dict[str, int]]:
    out = subprocess.run(
        [sys.executable, str(ENTRY), str(tmp_path / f"store-{mode}"), mode],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=True,
    )  # fmt: skip
    steps: list[dict[str, int]] = json.loads(out.stdout.strip().splitlines()[-1])
    return steps


def test_first_step_counts_as_later_ones(tmp_path: Path) -> None:
    first, second = _steps(tmp_path, "follow")
    assert first["peak"] == second["peak"]
    # after the step: the two weights (one rank: whole shards) and their two gradients
    assert first["end"] == second["end"] == 4 * LAYER


def test_without_following_the_first_step_keeps_gathered_buffers(tmp_path: Path) -> None:
    """The check above can fail: unfollowed, the buffers FSDP2 made in the first step and
    freed by resizing stay counted (one or both layers' gathered weights: the count also
    loses a storage whose address a later allocation reuses)."""
    first, second = _steps(tmp_path, "off")
    assert first["end"] - second["end"] in (LAYER, 2 * LAYER)
    assert first["peak"] > second["peak"]
