"""Running ``hetplan train`` in-process from the write-back tests."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hetplan.cli.main import main

TRIES = 4
"""Runs of a plan until one is steady enough to be written back: the tests check what a
write-back does, and a run on a machine busy with other work may fail the spread gate."""
STEPS = ["--steps", "30", "--warmup", "5"]
"""As measured for the spread limit (MAX_STEP_SPREAD): about 2 s of steps for gpt-tiny here."""


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """``hetplan ARGV`` in this process; its stdout (a failure shows its stderr)."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    assert exc.value.code in (0, None), out.err
    return out.out


def train_until_written(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """``hetplan train ARGV --json`` (with :data:`STEPS`) until a run is written back; its
    report. Skips the test when the gate refuses every run: the machine is too busy to
    measure, which the gate is there to say."""
    why: list[str] = []
    for _ in range(TRIES):
        report = json.loads(cli([*argv, *STEPS, "--json"], capsys))
        if report["profiles_written"]:
            return dict(report)
        why = report["profile_not_written"]
        assert any("too unstable to trust" in w for w in why), why  # the only reason to retry
    pytest.skip(f"no steady run in {TRIES} tries (the machine is busy): {why}")
