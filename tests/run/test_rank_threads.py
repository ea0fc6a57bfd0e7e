"""A CPU rank pinned to several cores runs as many intra-op threads (what the cost model
prices it at, ``cost.threads``)."""

from __future__ import annotations

import os

import pytest

from hetplan.run.launch.spawn import launch_local

CORES = sorted(os.sched_getaffinity(0))


@pytest.mark.skipif(len(CORES) < 2, reason="needs two cores")
def test_rank_pinned_to_two_cores_runs_two_threads() -> None:
    pair = (CORES[0], CORES[1])
    out = launch_local("run_entries:allreduce", 1, payload={}, cpus=[pair])
    assert out == [(0, 1.0, list(pair), 2)]
