"""SIGINT (Ctrl-C) and SIGTERM end a running ``hetplan train`` cleanly (issue 28): every process
of the run goes, the steps measured so far are kept, the temporary folders are removed, and the
one-line message names the checkpoint to resume from. A real command in a process of its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCAL = str(ROOT / "examples" / "clusters" / "local-cpu.yaml")
STEPS_BEFORE_SIGNAL = 3  # complete steps the run has logged when the signal is sent
START_BOUND_S = 120.0  # seconds the run may take to log them (2 busy cores, torch imports)
DEVICES = ["local.0", "local.1"]
END_BOUND_S = 20.0  # seconds from the signal to the command's exit (KILL_WAIT_S is 10 s)


def _plan(tmp_path: Path) -> Path:
    stages = [{"layers": ["stem", "layer1_0"]}, {"layers": ["layer2_0", "pool", "head"]}]
    data = {
        "model": {"name": "resnet-tiny", "dataset": "cifar10"},
        "strategy": "gpipe",
        "global_batch": 4,
        "micro_batches": 2,
        "pipelines": [
            {
                "batch": 4,
                "stages": [s | {"devices": [d]} for s, d in zip(stages, DEVICES, strict=True)],
            }
        ],
    }
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    return path


def _logged_steps(tmp: Path) -> int:
    logs = list(tmp.glob("hetplan-steps-*/rank-1.jsonl"))
    return len(logs[0].read_text().splitlines()) if logs else 0


def _agent(parent: int) -> int:
    """The pid of the run's agent, a child of ``parent`` (it leads the run's process group)."""
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        if ppid == parent and "hetplan.run.launch._agent" in cmdline:
            return int(entry.name)
    raise AssertionError("no agent process found")


def _group(pgid: int) -> list[int]:
    """Live processes of process group ``pgid`` (the agent, the forkserver, the ranks)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


@pytest.mark.slow  # a real 2-rank run, stopped after a few steps
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_the_run_keeps_its_steps_and_names_the_checkpoint(
    tmp_path: Path, sig: signal.Signals
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    ckpt, out = tmp_path / "ck", tmp_path / "m.json"
    argv = [sys.executable, "-m", "hetplan", "train", str(_plan(tmp_path)), "--cluster", LOCAL]
    argv += ["--steps", "100000", "--warmup", "0", "--no-save-profile", "--out", str(out)]
    argv += ["--checkpoint", str(ckpt), "--checkpoint-every", "1"]
    env = dict(os.environ, TMPDIR=str(tmp))
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + START_BOUND_S
        while _logged_steps(tmp) < STEPS_BEFORE_SIGNAL:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the run logged no steps"
            time.sleep(0.2)
        agent = _agent(proc.pid)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=END_BOUND_S)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, err
    line = err.strip()
    assert "\n" not in line, err
    assert line.startswith(f"hetplan: interrupted by {sig.name}; kept ")
    assert f"measured steps in {out.with_suffix('.steps.jsonl')}" in line
    assert f"resume with --resume {ckpt}/step-" in line
    assert out.with_suffix(".steps.jsonl").stat().st_size > 0
    # No hetplan-steps-*, torchelastic_* nor pymp-* (torchinductor_<user> is torch's compile
    # cache, kept across runs by design).
    assert [p.name for p in tmp.iterdir() if not p.name.startswith("torchinductor_")] == []
    assert _group(agent) == []
