"""launch_local: results, pinning, and bounded failures that leave no process behind."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hetplan.errors import InputError
from hetplan.run.launch.spawn import RunError, launch_local

FAILURE_BOUND_S = 60.0  # the bound for a killed rank
# Seconds from a rank's freeze to the run's end: issue 28's target is 30 (21.3 measured on a
# 2-core machine: 15-20 s of heartbeat, 1 s of teardown); the margin is for 2 test workers
# sharing those 2 cores. Before the fix: 49-55 s (torch's 30 s SIGTERM grace).
FROZEN_BOUND_S = 45.0


def _alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie (a zombie runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _session_members(sid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(int(entry.name))
    return out


def _assert_no_orphans(pid_dir: Path, expected: int) -> None:
    records = [f.read_text().split() for f in sorted(pid_dir.glob("*.pid"))]
    assert len(records) >= expected - 1  # a rank that never started records nothing
    for pid, sid in records:
        assert not _alive(int(pid)), f"rank process {pid} survived the failure"
        assert _session_members(int(sid)) == [], f"processes of session {sid} survived"


def test_results_by_rank_and_pinning() -> None:
    cores = sorted(os.sched_getaffinity(0))
    cpus = [(cores[0],), (cores[-1],)]
    out = launch_local("run_entries:allreduce", 2, payload={}, cpus=cpus)
    # allreduce of rank+1 over 2 ranks = 1 + 2; each rank pinned to its core, 1 thread.
    assert out == [(0, 3.0, [cores[0]], 1), (1, 3.0, [cores[-1]], 1)]


def test_bad_arguments_are_input_errors() -> None:
    with pytest.raises(InputError, match=r"package\.module:function"):
        launch_local("no_colon", 2, payload={})
    with pytest.raises(InputError, match="2 entries for 3 ranks"):
        launch_local("run_entries:allreduce", 3, payload={}, cpus=[(0,), (0,)])
    with pytest.raises(InputError, match=r"core\(s\) \[4096\]"):
        launch_local("run_entries:allreduce", 1, payload={}, cpus=[(4096,)])


def test_rank_raising_names_rank_and_exception(tmp_path: Path) -> None:
    start = time.monotonic()
    with pytest.raises(RunError) as info:
        launch_local("run_entries:raise_on", 3, payload={"bad": 2, "pid_dir": str(tmp_path)})
    assert time.monotonic() - start < FAILURE_BOUND_S
    assert str(info.value) == "rank 2 failed: ValueError: bad value on purpose"
    assert info.value.rank == 2
    assert "raise_on" in info.value.details  # the rank's traceback
    _assert_no_orphans(tmp_path, 3)


def test_killed_rank_names_rank_and_signal(tmp_path: Path) -> None:
    start = time.monotonic()
    with pytest.raises(RunError) as info:
        launch_local("run_entries:sigkill_on", 2, payload={"bad": 1, "pid_dir": str(tmp_path)})
    assert time.monotonic() - start < FAILURE_BOUND_S
    assert info.value.rank == 1
    assert "killed by signal SIGKILL" in str(info.value)
    _assert_no_orphans(tmp_path, 2)


def test_frozen_rank_ends_the_run_naming_it(tmp_path: Path) -> None:
    with pytest.raises(RunError) as info:
        launch_local(
            "run_entries_frozen:sigstop_on", 3, payload={"bad": 1, "pid_dir": str(tmp_path)},
            timeout_s=120.0,
        )  # fmt: skip
    took = time.time() - (tmp_path / "1.pid").stat().st_mtime  # written just before SIGSTOP
    assert str(info.value).startswith("rank 1 stopped responding (seen by rank "), info.value
    assert took < FROZEN_BOUND_S, took
    _assert_no_orphans(tmp_path, 3)


def test_rank_that_never_joins_times_out() -> None:
    rdzv_s = 2.0
    with pytest.raises(RunError) as info:
        launch_local("run_entries_late:joined", 2, payload={}, rdzv_timeout_s=rdzv_s)
    # Rank 0 gives up waiting for rank 1 in the process group's rendezvous.
    assert str(info.value).startswith("rank 0 failed: DistStoreError")
    assert "timeout" in str(info.value)


def test_overall_timeout_kills_everything(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="time limit of 6 s") as info:
        launch_local(
            "run_entries:sleep_forever", 2, payload={"pid_dir": str(tmp_path)}, timeout_s=6.0
        )
    assert info.value.rank is None
    for f in tmp_path.glob("*.pid"):
        pid, sid = f.read_text().split()
        assert not _alive(int(pid))
        assert _session_members(int(sid)) == []
