"""Per-step logs: writing, following, adding up, merging; launch_local's progress ticks."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from hetplan.cli.progress_view import ProgressLine
from hetplan.run.launch.spawn import RankContext, launch_local
from hetplan.run.loop.steplog import (
    StepLogReader,
    StepLogWriter,
    StepSummary,
    complete_steps,
    merge,
    progress_of,
    read_records,
)

ENTRY_STEPS = 3
ENTRY_STEP_S = 0.4  # 3 steps of 0.4 s: the run lasts > 1 s besides the launch


def _record(step: int, rank: int, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "step": step,
        "rank": rank,
        "pipeline": 0,
        "stage": rank,
        "step_s": 0.1,
        "loss": None,
        "samples": 0,
        "peak_memory_bytes": None,
        "timed": True,
    }
    return base | fields


def log_steps(ctx: RankContext, payload: dict[str, Any]) -> int:
    """Rank entry: one pipeline of ``world_size`` stages logging ``ENTRY_STEPS`` steps."""
    last = ctx.rank == ctx.world_size - 1
    with StepLogWriter(Path(payload["dir"]), ctx.rank) as log:
        for step in range(ENTRY_STEPS):
            time.sleep(ENTRY_STEP_S)
            log.write(
                {
                    "step": step,
                    "pipeline": 0,
                    "stage": ctx.rank,
                    "step_s": ENTRY_STEP_S,
                    "loss": 1.0 / (step + 1) if last else None,
                    "samples": 4 if last else 0,
                    "peak_memory_bytes": None,
                    "timed": step > 0,
                }
            )
    return ctx.rank


def test_round_trip_two_ranks(tmp_path: Path) -> None:
    with StepLogWriter(tmp_path, 0) as w0, StepLogWriter(tmp_path, 1) as w1:
        w0.write(_record(5, 0, step_s=0.25))
        # Flushed at once: readable before the writer is closed.
        assert read_records(tmp_path) == {0: [_record(5, 0, step_s=0.25)], 1: []}
        rec = _record(5, 1, loss=0.5, samples=8, peak_memory_bytes=1024, timed=False)
        del rec["rank"]  # filled in by the writer
        w1.write(rec)
        w0.write(_record(6, 0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank-0.jsonl", "rank-1.jsonl"]
    assert read_records(tmp_path) == {
        0: [_record(5, 0, step_s=0.25), _record(6, 0)],
        1: [_record(5, 1, loss=0.5, samples=8, peak_memory_bytes=1024, timed=False)],
    }
    assert read_records(tmp_path / "absent") == {}


def test_writer_rejects_wrong_rank_and_missing_fields(tmp_path: Path) -> None:
    with StepLogWriter(tmp_path, 0) as w:
        with pytest.raises(ValueError, match="rank 1"):
            w.write(_record(0, 1))
        with pytest.raises(ValueError, match="loss"):
            w.write({"step": 0, "pipeline": 0, "stage": 0, "step_s": 0.1, "samples": 0})


def test_partial_last_line_is_skipped(tmp_path: Path) -> None:
    with StepLogWriter(tmp_path, 0) as w:
        w.write(_record(0, 0))
        w.write(_record(1, 0))
    reader = StepLogReader(tmp_path)
    assert reader.read_new() == {0: [_record(0, 0), _record(1, 0)]}
    with open(tmp_path / "rank-0.jsonl", "a") as f:
        f.write('{"step": 2, "rank": 0, "pip')  # a line the rank is still writing
    assert read_records(tmp_path) == {0: [_record(0, 0), _record(1, 0)]}
    assert reader.read_new() == {}
    with open(tmp_path / "rank-0.jsonl", "a") as f:  # the rest of the line arrives
        f.write(json.dumps(_record(2, 0))[len('{"step": 2, "rank": 0, "pip') :] + "\n")
    assert reader.read_new() == {0: [_record(2, 0)]}
    assert read_records(tmp_path) == {0: [_record(0, 0), _record(1, 0), _record(2, 0)]}


def _two_pipelines(directory: Path) -> None:
    """2 pipelines x 2 stages; ranks 1 and 3 are last stages. Step 10 is complete, step 11
    lacks rank 3."""
    step_s = {0: 0.2, 1: 0.25, 2: 0.1, 3: 0.15}
    for rank in range(4):
        last = rank in (1, 3)
        with StepLogWriter(directory, rank) as w:
            w.write(
                {
                    "step": 10,
                    "pipeline": rank // 2,
                    "stage": rank % 2,
                    "step_s": step_s[rank],
                    "loss": {1: 0.25, 3: 0.5}.get(rank),
                    "samples": 8 if last else 0,
                    "peak_memory_bytes": 1000 * (rank + 1),
                    "energy_j": 2.0 if rank == 0 else None,
                    "timed": True,
                }
            )
            if rank != 3:
                w.write(_record(11, rank, pipeline=rank // 2, stage=rank % 2))


def test_complete_steps_sum_losses_and_samples(tmp_path: Path) -> None:
    _two_pipelines(tmp_path)
    records = read_records(tmp_path)
    [s] = complete_steps(records, 4)
    assert s.step == 10
    assert s.loss == pytest.approx(0.75)  # 0.25 + 0.5 (ranks 1 and 3)
    assert s.samples == 16  # 8 + 8
    assert s.iteration_s == pytest.approx(0.25)  # rank 1, the slowest
    assert s.samples_per_s == pytest.approx(64.0)  # 16 / 0.25
    assert s.timed
    assert s.ranks == [
        {"rank": 0, "step_s": 0.2, "peak_memory_bytes": 1000, "energy_j": 2.0},
        {"rank": 1, "step_s": 0.25, "peak_memory_bytes": 2000, "energy_j": None},
        {"rank": 2, "step_s": 0.1, "peak_memory_bytes": 3000, "energy_j": None},
        {"rank": 3, "step_s": 0.15, "peak_memory_bytes": 4000, "energy_j": None},
    ]
    # With a world of 3 (rank 3's log ignored) step 11 is complete too: no loss, no samples.
    assert [(x.step, x.loss, x.samples) for x in complete_steps(records, 3)] == [
        (10, pytest.approx(0.25), 8),
        (11, None, 0),
    ]
    assert complete_steps(records, 5) == []


def test_merge_writes_complete_steps_atomically(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    _two_pipelines(logs)
    out = tmp_path / "new" / "steps.jsonl"
    assert merge(logs, 4, out) == 1
    lines = out.read_text().splitlines()
    assert len(lines) == 1
    row = json.loads(lines[0])
    assert row["step"] == 10
    assert row["loss"] == pytest.approx(0.75)
    assert row["samples"] == 16
    assert [r["rank"] for r in row["ranks"]] == [0, 1, 2, 3]
    assert sorted(p.name for p in out.parent.iterdir()) == ["steps.jsonl"]  # no tmp file
    assert merge(logs, 3, out) == 2  # replaced, not appended
    assert [json.loads(x)["step"] for x in out.read_text().splitlines()] == [10, 11]
    assert sorted(p.name for p in out.parent.iterdir()) == ["steps.jsonl"]


def _summary(step: int, iteration_s: float, samples: int, loss: float) -> StepSummary:
    return StepSummary(
        step=step,
        loss=loss,
        iteration_s=iteration_s,
        samples=samples,
        samples_per_s=samples / iteration_s,
        timed=True,
        ranks=[],
    )


def test_progress_of_hand_numbers() -> None:
    none = progress_of([], 10)
    assert (none.done, none.total, none.loss, none.step_s, none.eta_s) == (0, 10, None, None, None)
    assert none.samples_per_s is None
    times = [1.0, 0.5, 0.3, 0.2, 0.4, 0.1]
    steps = [_summary(i, t, 30, loss=1.0 - i / 10) for i, t in enumerate(times)]
    p = progress_of(reversed(steps), 10)  # order of the input does not matter
    assert p.done == 6
    assert p.total == 10
    assert p.loss == pytest.approx(0.5)  # step 5's
    # Last 5 times 0.5 0.3 0.2 0.4 0.1: median 0.3 (the warm-up 1.0 is out of the window).
    assert p.step_s == pytest.approx(0.3)
    assert p.samples_per_s == pytest.approx(100.0)  # 30 / 0.3
    assert p.eta_s == pytest.approx(1.2)  # 4 steps left x 0.3
    two = progress_of(steps[:2], 10)  # median of 1.0 and 0.5
    assert two.step_s == pytest.approx(0.75)
    assert two.eta_s == pytest.approx(6.0)  # 8 x 0.75
    assert progress_of(steps, 4).eta_s == 0.0  # more steps than planned: nothing left


def test_launch_local_ticks_while_the_run_goes(tmp_path: Path) -> None:
    out = io.StringIO()
    line = ProgressLine(
        tmp_path, 2, ENTRY_STEPS, console=Console(file=out, force_terminal=True, width=120)
    )
    ticks: list[float] = []

    def tick() -> None:
        ticks.append(time.monotonic())
        line.poll()
        raise RuntimeError("a failing tick must not end the run")

    start = time.monotonic()
    with line:
        payload = {"dir": str(tmp_path)}
        result = launch_local("test_steplog:log_steps", 2, payload=payload, on_tick=tick)
        line.poll()
    assert result == [0, 1]
    assert len(ticks) >= 1
    assert time.monotonic() - start < 30.0
    p = line.progress
    assert (p.done, p.total) == (3, 3)
    assert p.loss == pytest.approx(1 / 3)  # step 2's loss on the last stage, rank 1
    assert p.samples_per_s == pytest.approx(10.0)  # 4 samples / 0.4 s
    assert "step" in out.getvalue()
    assert merge(tmp_path, 2, tmp_path / "steps.jsonl") == ENTRY_STEPS
