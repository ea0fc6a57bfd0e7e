"""Every bad input of the user review (issue 15) and the ones it adds: exit status 2, one line
on stderr naming the option, field or file, no traceback, and no file written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hetplan.cli.main import main

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
LOCAL = str(CLUSTERS / "local-cpu.yaml")
HETERO = str(CLUSTERS / "hetero-2node.yaml")
EDGE = str(CLUSTERS / "edge.yaml")
TINY = ["--model", "gpt-tiny", "--batch", "8"]

UNPRICED = """\
name: unpriced
nodes:
  - name: n
    devices:
      - {type: box, count: 2}
    link: {type: shm}
device_types:
  box:
    peak_tflops: {fp32: 1.0}
    memory_GiB: 8
    memory_bandwidth_GBps: 50
    idle_power_w: 10
    max_power_w: 50
"""


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    code = exc.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A plan for local-cpu, the same plan with bad bucket sizes, and an unpriced cluster."""
    root = tmp_path_factory.mktemp("made")
    plan = root / "plan.json"
    with pytest.raises(SystemExit) as exc:
        main(["plan", *TINY, "--cluster", LOCAL, "--strategies", "dp", "--out", str(plan),
              "--json"])  # fmt: skip
    assert exc.value.code in (0, None)
    out = {"plan": plan}
    for name, value in (("bucket_neg", -1), ("bucket_zero", 0)):
        data = json.loads(plan.read_text())
        data["bucket_mb"] = value
        out[name] = root / f"{name}.json"
        out[name].write_text(json.dumps(data))
    out["unpriced"] = root / "unpriced.yaml"
    out["unpriced"].write_text(UNPRICED)
    return out


def _cases(made: dict[str, Path], blocker: Path, work: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (argv, text the one line must contain). ``blocker`` is a file, so
    ``blocker/x`` cannot be written; ``work`` is an empty folder."""
    plan = str(made["plan"])
    bad = str(blocker / "x.json")
    return {
        "plan --out under a file": (
            ["plan", *TINY, "--cluster", LOCAL, "--out", bad], f"--out {bad}"),
        "plan --html under a file": (
            ["plan", *TINY, "--cluster", LOCAL, "--out", str(work / "p.json"), "--html", bad],
            f"--html {bad}"),
        "train --out under a file": (["train", plan, "--cluster", LOCAL, "--out", bad], "--out"),
        "train --checkpoint is a file": (
            ["train", plan, "--cluster", LOCAL, "--out", str(work / "m.json"),
             "--checkpoint", str(blocker)], "--checkpoint"),
        "profile --out under a file": (["profile", "gpt-tiny", "--out", bad], "--out"),
        "profile --out store under a file": (
            ["profile", "gpt-tiny", "--out", str(blocker / "store")], "--out"),
        "profile-links --out under a file": (
            ["profile-links", "--cluster", LOCAL, "--out", bad], "--out"),
        "cluster generate --out under a file": (
            ["cluster", "generate", "--nodes", "T4:2", "--out", bad], "--out"),
        "predict --out is a folder": (
            ["predict", "--cluster", LOCAL, "--plan", plan, "--out", str(work)], "is a folder"),
        "predict --html under a file": (
            ["predict", "--cluster", LOCAL, "--plan", plan, "--html", bad], "--html"),
        "bench --out is a file": (["bench", "--quick", "--out", str(blocker)], "--out"),
        "plan --batch 10^30": (
            ["plan", "--model", "gpt-tiny", "--cluster", LOCAL, "--out", str(work / "p.json"),
             "--batch", "1" + "0" * 30], "--batch must be between 1 and"),
        "predict --batch 10^30": (
            ["predict", "--model", "gpt-tiny", "--cluster", LOCAL, "--strategy", "dp",
             "--batch", "1" + "0" * 30], "--batch must be between 1 and"),
        "predict bucket_mb -1": (
            ["predict", "--cluster", LOCAL, "--plan", str(made["bucket_neg"])], "bucket_mb"),
        "predict bucket_mb 0": (
            ["predict", "--cluster", LOCAL, "--plan", str(made["bucket_zero"])], "bucket_mb"),
        "train bucket_mb 0": (
            ["train", str(made["bucket_zero"]), "--cluster", LOCAL, "--out",
             str(work / "m.json")], "bucket_mb"),
        "plan --max-devices 0": (
            ["plan", *TINY, "--cluster", LOCAL, "--out", str(work / "p.json"),
             "--max-devices", "0"], "--max-devices must be >= 1"),
        "plan --max-power -5": (
            ["plan", *TINY, "--cluster", LOCAL, "--out", str(work / "p.json"),
             "--max-power", "-5"], "--max-power must be > 0"),
        "plan --min-devices 0": (
            ["plan", *TINY, "--cluster", LOCAL, "--out", str(work / "p.json"),
             "--min-devices", "0"], "--min-devices must be between 1 and"),
        "plan --min-devices over the cluster": (
            ["plan", *TINY, "--cluster", LOCAL, "--out", str(work / "p.json"),
             "--min-devices", "3"], "cluster's 2 devices"),
        "plan --all-devices above --max-devices": (
            ["plan", *TINY, "--cluster", LOCAL, "--out", str(work / "p.json"),
             "--all-devices", "--max-devices", "1"], "--max-devices 1 is below"),
        "plan --all-devices and --min-devices": (
            ["plan", *TINY, "--cluster", LOCAL, "--out", str(work / "p.json"),
             "--all-devices", "--min-devices", "1"], "give one of the two"),
        "predict dp --tp 3 on 2 devices": (
            ["predict", "--model", "gpt-tiny", "--cluster", LOCAL, "--strategy", "dp",
             "--tp", "3", "--batch", "8"], "--tp 3: a tensor-parallel group needs 3 devices"),
        "predict dp --tp 3 not dividing 8 devices": (
            ["predict", "--model", "gpt-tiny", "--cluster", HETERO, "--strategy", "dp",
             "--tp", "3", "--batch", "8"], "--tp 3 does not divide the 8 devices"),
        "bench --cluster-names unknown": (
            ["bench", "--quick", "--out", str(work / "b"), "--cluster-names", "nope.yaml"],
            "--cluster-names: no cluster 'nope.yaml'"),
        "predict a plan of another cluster": (
            ["predict", "--cluster", EDGE, "--plan", plan], "was made for cluster 'local-cpu'"),
        "train a plan of another cluster": (
            ["train", plan, "--cluster", EDGE, "--out", str(work / "m.json")],
            "was made for cluster 'local-cpu'"),
        "plan --objective cost without prices": (
            ["plan", *TINY, "--cluster", str(made["unpriced"]), "--out", str(work / "p.json"),
             "--objective", "cost"], "--objective cost need prices"),
        "plan --budget without prices": (
            ["plan", *TINY, "--cluster", str(made["unpriced"]), "--out", str(work / "p.json"),
             "--budget", "3"], "--budget need prices"),
    }  # fmt: skip


CASE_NAMES = list(_cases({k: Path() for k in ("plan", "bucket_neg", "bucket_zero",
                                              "unpriced")}, Path(), Path()))  # fmt: skip


@pytest.mark.parametrize("name", CASE_NAMES)
def test_bad_input_is_one_line_exit_2_nothing_written(
    name: str, made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    work = tmp_path / "work"
    work.mkdir()
    argv, expected = _cases(made, blocker, work)[name]
    before = _files(tmp_path)
    code, err = _run(argv, capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("hetplan: error: "), err
    assert expected in err, err
    assert "Traceback" not in err
    assert _files(tmp_path) == before
    assert not list(work.iterdir())


def test_other_cluster_flag_uses_the_plan_anyway(
    made: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The refusal names its override, and the override works (both clusters have 2 CPUs)."""
    other = CLUSTERS / "local-cpu-hetero.yaml"
    code, err = _run(["predict", "--cluster", str(other), "--plan", str(made["plan"])], capsys)
    if code == 0:
        pytest.fail("local-cpu-hetero should differ from local-cpu in its devices")
    assert "--other-cluster" in err
    with pytest.raises(SystemExit) as exc:
        main(["predict", "--cluster", str(other), "--plan", str(made["plan"]), "--other-cluster"])
    assert exc.value.code in (0, None)


def test_broken_pipe_exits_0_quietly(tmp_path: Path) -> None:
    """``hetplan ... | head`` where the reader is gone before the first write."""
    read, write = os.pipe()
    os.close(read)
    proc = subprocess.run(
        [sys.executable, "-m", "hetplan", "devices"],
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        check=False,
    )
    os.close(write)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_cluster_show_of_a_million_devices_answers(tmp_path: Path) -> None:
    """One node with ``count: 1000000`` is summarised (no answer in 300 s before); the bound
    is generous: this guards against the quadratic summary coming back, not a speed target."""
    big = tmp_path / "big.yaml"
    big.write_text(
        "name: big\nnodes:\n  - name: n\n    devices:\n      - {type: T4, count: 1000000}\n"
        "    link: {type: PCIe3x16}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "hetplan", "cluster", "show", str(big)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "1,000,000" in proc.stdout or "1000000" in proc.stdout


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_an_unwritable_html_path_is_refused_before_the_plan_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 28: ``plan --html /proc/x.html`` failed after writing plan.json. Permission bits
    allow it (as root, /proc is "writable"), so the folder is probed with a temporary file."""
    out = tmp_path / "plan.json"
    argv = ["plan", *TINY, "--cluster", LOCAL, "--out", str(out), "--html", "/proc/x.html"]
    code, err = _run(argv, capsys)
    assert code == 2, err
    # As root the probe refuses ("cannot write in /proc"); otherwise the permission bits do.
    assert err.startswith("hetplan: error: --html /proc/x.html: "), err
    assert "cannot write in /proc" in err or "not writable" in err, err
    assert not out.exists()
