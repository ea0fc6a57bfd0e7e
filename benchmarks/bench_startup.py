"""Start-up time of the light commands, as a user meets it: a fresh ``hetplan`` process each.

Run: ``.venv/bin/python benchmarks/bench_startup.py [--repeat N]``. Prints a markdown table of
the median and fastest wall time of each command over ``--repeat`` runs (interleaved, so that
a burst of load on a shared machine hits every command alike), next to two references in the
same run: the bare interpreter and ``import torch``. The model list is cached first (as after
any earlier ``hetplan models``), in a temporary cache folder. Target: under 0.5 s median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HETPLAN = [sys.executable, "-m", "hetplan"]
CLUSTER = str(ROOT / "examples" / "clusters" / "hetero-2node.yaml")
COMMANDS: list[tuple[str, list[str]]] = [
    ("python -c pass (reference)", [sys.executable, "-c", "pass"]),
    ("python -c 'import torch' (reference)", [sys.executable, "-c", "import torch"]),
    ("hetplan --help", [*HETPLAN, "--help"]),
    ("hetplan --version", [*HETPLAN, "--version"]),
    ("hetplan devices", [*HETPLAN, "devices"]),
    ("hetplan models (cached list)", [*HETPLAN, "models"]),
    ("hetplan cluster show hetero-2node.yaml", [*HETPLAN, "cluster", "show", CLUSTER]),
    ("hetplan plan --help", [*HETPLAN, "plan", "--help"]),
]
TARGET_S = 0.5  # seconds, issue 15


def _time(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "HETPLAN_CACHE_DIR": cache, "COLUMNS": "120"}
        env.pop("HETPLAN_NO_CACHE", None)
        _time([*HETPLAN, "models"], env)  # fills the model list's cache
        times: dict[str, list[float]] = {label: [] for label, _ in COMMANDS}
        for _ in range(args.repeat):
            for label, argv in COMMANDS:
                times[label].append(_time(argv, env))
    print(f"| command | median | fastest | under {TARGET_S} s |")
    print("|---|---|---|---|")
    for label, _ in COMMANDS:
        med, best = statistics.median(times[label]), min(times[label])
        ok = "-" if "reference" in label else ("yes" if med < TARGET_S else "no")
        print(f"| `{label}` | {med:.2f} s | {best:.2f} s | {ok} |")
    cpus, version = os.cpu_count(), sys.version.split()[0]
    print(f"\n{args.repeat} runs each, interleaved; {cpus} CPUs; Python {version}")


if __name__ == "__main__":
    main()
