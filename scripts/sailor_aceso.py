"""Extract per-layer GPU times from Sailor's Aceso profiles into ``benchmarks/data``.

Sailor (github.com/eth-easl/sailor, ETH Zurich, MIT licence; commit cf2c8e3, SOSP '25 artifact)
ships the operator profiles Aceso's profiler took of three GPT-style models (OPT-350,
GPT-Neo-2.7, OPT-30: Megatron-LM layers, sequence 2048) on six GPU types (A100-40, GH-96 (a
GH200), V100-16, RTX-3090, Titan-RTX, RTX-2080 Ti), fp16 and fp32, micro-batches 1-8. Each op
is timed as the mean of back-to-back calls between two synchronisations (Aceso's
``op_profiler.py``); the head and loss (``gpt-post-process``) call by call.

This script sums each model's ops into hetplan's layers of the same model (``embed``; one
transformer ``block``, every block being equal; ``head`` = final layer norm + output
projection and loss) for Aceso's partition ``algo0`` (Megatron's), and writes one row per GPU,
dtype, model, micro-batch, tensor-parallel degree and part. At ``tp`` > 1 a row is one rank's
time, the TP all-reduces included (Megatron runs them inside the ops Aceso times). Groups where
an op ran out of memory (Aceso writes 10 s) are left out.

Beside it, ``sailor_intra_node.csv``: the bandwidth Sailor measured between the GPUs of one
node of each type (``sailor/providers/intra_node_bandwidths.json``, the largest over message
sizes): with ``gpus`` GPUs, ``gpus / 2`` NCCL sends at once, each rank of the first half to
one of the second (``sailor/profiling/networking/test_sendrecv.py``); ``bandwidth_GBps`` is
their sum, ``per_pair_GBps`` one pair's share.

    python scripts/sailor_aceso.py SAILOR_CHECKOUT [OUT]
      (default OUT: benchmarks/data/sailor_aceso_layers.csv)
"""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path

PROFILER = Path("sailor/Planner/baselines/Aceso/profiler")
OOM_US = 1e7
"""Microseconds Aceso writes for an op that ran out of memory."""
PARTS = {"embed": ("encoder-embedding",), "head": ("final-layernorm", "gpt-post-process")}
BLOCK_PREFIX = "enc-"
NAME = re.compile(r"(?P<model>.+)_mbs(?P<mbs>\d+)_tp(?P<tp>\d+)_algo0\.csv")
DEFAULT_OUT = (
    Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "sailor_aceso_layers.csv"
)
LINKS_FILE = Path("sailor/providers/intra_node_bandwidths.json")
LINKS_OUT = "sailor_intra_node.csv"
HEADER = ("gpu", "dtype", "model", "micro_batch", "tp", "part", "fwd_us", "bwd_us")


def parts(path: Path) -> dict[str, tuple[float, float]] | None:
    """Forward and backward microseconds of each hetplan part, None where an op ran out."""
    with path.open() as f:
        ops = {
            r["op_name"]: (float(r["forward-compute"]), float(r["backward-compute"]))
            for r in csv.DictReader(f)
        }
    if any(max(t) >= OOM_US for t in ops.values()):
        return None
    out = {p: tuple(sum(ops[n][i] for n in names) for i in (0, 1)) for p, names in PARTS.items()}
    block = [t for n, t in ops.items() if n.startswith(BLOCK_PREFIX)]
    out["block"] = (sum(t[0] for t in block), sum(t[1] for t in block))
    return {k: (v[0], v[1]) for k, v in out.items()}


def rows(root: Path) -> list[tuple[str, ...]]:
    out = []
    for folder in sorted((root / PROFILER).glob("*/profiled-data-fp*")):
        gpu, dtype = folder.parent.name, folder.name.removeprefix("profiled-data-")
        for path in sorted(folder.glob("*_tp*_algo0.csv")):
            m = NAME.fullmatch(path.name)
            got = parts(path) if m else None
            if m is None or got is None:
                continue
            for part in ("embed", "block", "head"):
                fwd, bwd = got[part]
                row = (gpu, dtype, m["model"], m["mbs"], m["tp"], part, f"{fwd:.3f}", f"{bwd:.3f}")
                out.append(row)
    return out


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print(__doc__, file=sys.stderr)
        return 2
    found = rows(Path(argv[0]))
    if not found:
        print(f"{argv[0]}: no {PROFILER}/*/profiled-data-*/*_algo0.csv", file=sys.stderr)
        return 2
    out = Path(argv[1]) if len(argv) > 1 else DEFAULT_OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        w.writerows(sorted(found, key=lambda r: (r[0], r[1], r[2], int(r[3]), int(r[4]), r[5])))
    print(f"{out}: {len(found)} rows")
    links = json.loads((Path(argv[0]) / LINKS_FILE).read_text())
    with (out.parent / LINKS_OUT).open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("gpu", "gpus", "bandwidth_GBps", "per_pair_GBps"))
        for gpu, by_size in sorted(links.items()):
            for gpus, (_, best) in sorted(by_size.items(), key=lambda kv: int(kv[0])):
                pair = best / 1e9 / (int(gpus) // 2)
                w.writerow((gpu, gpus, f"{best / 1e9:.2f}", f"{pair:.2f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
