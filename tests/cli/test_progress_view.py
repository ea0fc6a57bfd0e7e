"""The live progress line: its text, and drawing it from the ranks' step logs."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from hetplan.cli.progress_view import ProgressLine, format_progress
from hetplan.run.loop.steplog import Progress, StepLogWriter


def _progress(**fields: object) -> Progress:
    base: dict[str, object] = {
        "done": 12,
        "total": 40,
        "loss": 0.4123,
        "step_s": 0.085,
        "samples_per_s": 1204.0,
        "eta_s": 2.4,
    }
    return Progress(**(base | fields))  # type: ignore[arg-type]


def test_format_progress_fields() -> None:
    assert format_progress(_progress()) == (
        "step 12/40  loss 0.4123  step 85.00 ms  1204 samples/s  ETA 2.4 s"
    )
    assert format_progress(_progress(eta_s=125.0)).endswith("ETA 2:05")
    assert format_progress(_progress(eta_s=3725.0)).endswith("ETA 1:02:05")
    assert "12.5 samples/s" in format_progress(_progress(samples_per_s=12.5))
    assert "loss 2.500e-05" in format_progress(_progress(loss=2.5e-5))
    assert format_progress(_progress(loss=None)) == (
        "step 12/40  step 85.00 ms  1204 samples/s  ETA 2.4 s"
    )
    before = Progress(done=0, total=40, loss=None, step_s=None, samples_per_s=None, eta_s=None)
    assert format_progress(before) == "step 0/40"


def _write_step(directory: Path, step: int, ranks: list[int]) -> None:
    for rank in ranks:
        with StepLogWriter(directory, rank) as w:
            w.write(
                {
                    "step": step,
                    "pipeline": 0,
                    "stage": rank,
                    "step_s": 0.5 if rank == 0 else 0.25,
                    "loss": 2.0 if rank == 1 else None,
                    "samples": 16 if rank == 1 else 0,
                }
            )


def test_progress_line_follows_the_logs(tmp_path: Path) -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with ProgressLine(tmp_path, 2, 4, console=console, label="training") as line:
        assert line.enabled
        line.poll()
        assert line.text() == "training  step 0/4"
        _write_step(tmp_path, 0, [0, 1])
        _write_step(tmp_path, 1, [0])  # rank 1 has not finished step 1 yet
        line.poll()
        # One step of 0.5 s (rank 0, the slowest) with 16 samples; 3 steps left.
        assert (
            line.text()
            == "training  step 1/4  loss 2.0000  step 500.00 ms  32 samples/s  ETA 1.5 s"
        )
        _write_step(tmp_path, 1, [1])
        line.poll()
        assert line.progress.done == 2
        assert line.text().startswith("training  step 2/4")
    assert "step 1/4" in out.getvalue()


def test_progress_line_off_without_terminal(tmp_path: Path) -> None:
    _write_step(tmp_path, 0, [0, 1])
    out = io.StringIO()
    with ProgressLine(tmp_path, 2, 4, console=Console(file=out)) as line:
        assert not line.enabled
        line.poll()
    assert out.getvalue() == ""
    terminal = Console(file=io.StringIO(), force_terminal=True)
    with ProgressLine(tmp_path, 2, 4, console=terminal, enabled=False) as line:
        assert not line.enabled
        line.poll()
    assert line.progress.done == 0  # a disabled line does not read the logs
