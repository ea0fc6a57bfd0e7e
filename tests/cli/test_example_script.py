"""``make example`` (scripts/example.sh) ends by printing what to try next (issue 28), and
every command it prints runs as printed from the repository root."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _sandbox(tmp: Path) -> Path:
    """A copy of the repository's root as the script sees it: its own ``scripts`` and
    ``out``, the examples and the venv linked (nothing is written in the repository)."""
    (tmp / "scripts").mkdir()
    shutil.copy2(ROOT / "scripts" / "example.sh", tmp / "scripts" / "example.sh")
    for name in ("examples", ".venv"):
        (tmp / name).symlink_to(ROOT / name)
    return tmp


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)


def _next_commands(out: str) -> list[str]:
    """The commands of the ``Next:`` block that ends the output (its ``#`` lines explain)."""
    lines = out.rstrip("\n").splitlines()
    start = lines.index("Next:")
    block = [x.strip() for x in lines[start + 1 :]]
    assert all(x.startswith(("# ", ".venv/bin/hetplan ")) for x in block), block
    return [x for x in block if not x.startswith("#")]


@pytest.mark.slow  # the example, then a real 3-process training run: about 30 s on 2 cores
def test_the_example_says_what_to_try_next_and_it_runs(tmp_path: Path) -> None:
    root = _sandbox(tmp_path)
    done = _run(["bash", str(root / "scripts" / "example.sh")], root)
    assert done.returncode == 0, done.stderr
    commands = _next_commands(done.stdout)
    assert len(commands) >= 3
    assert any(c.split()[1] == "train" for c in commands)
    assert commands[-1] == ".venv/bin/hetplan plan --help"
    for command in commands:
        ran = _run(shlex.split(command), root)
        assert ran.returncode == 0, f"{command}\n{ran.stderr}"
    for written in ("plan.html", "cpu-plan.json", "cpu-train.json"):
        assert (root / "out" / written).is_file(), written
