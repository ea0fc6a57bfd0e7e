"""``scripts/sailor_aceso.py``: Aceso's operator profiles summed into hetplan's layers, on a
hand-made profiler folder (expected values counted by hand)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import sailor_aceso as sa  # noqa: E402

HEADER = "op_name,forward-compute,backward-compute,input_size\n"
OPS = (
    "encoder-embedding,10,20,0\n"
    "enc-1st-layernorm,1,2,0\n"
    "enc-attention-qkv,100,200,0\n"
    "enc-MLP-GEMM-2,30,40,0\n"
    "final-layernorm,3,4,0\n"
    "gpt-post-process,500,600,0\n"
)


def _checkout(tmp_path: Path) -> Path:
    folder = tmp_path / sa.PROFILER / "A100-40" / "profiled-data-fp16"
    folder.mkdir(parents=True)
    (folder / "OPT-350_mbs2_tp1_algo0.csv").write_text(HEADER + OPS)
    (folder / "OPT-350_mbs2_tp4_algo0.csv").write_text(HEADER + OPS.replace("100,200", "50,90"))
    (folder / "OPT-350_mbs2_tp1_algo1.csv").write_text(HEADER + OPS)  # another split: unread
    oom = OPS.replace("30,40", "10000000.000,10000000.000")
    (folder / "OPT-350_mbs8_tp1_algo0.csv").write_text(HEADER + oom)
    links = tmp_path / sa.LINKS_FILE
    links.parent.mkdir(parents=True)
    links.write_text(json.dumps({"A100-40": {"2": [[0.1], 2.0e11], "8": [[0.1], 4.0e10]}}))
    return tmp_path


def test_ops_sum_into_layers_per_tp_and_an_out_of_memory_group_is_left_out(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out" / "layers.csv"
    assert sa.main([str(_checkout(tmp_path)), str(out)]) == 0
    with out.open() as f:
        rows = {(r["tp"], r["part"]): (r["fwd_us"], r["bwd_us"]) for r in csv.DictReader(f)}
    assert rows == {
        ("1", "embed"): ("10.000", "20.000"),
        ("1", "block"): ("131.000", "242.000"),  # 1 + 100 + 30, 2 + 200 + 40
        ("1", "head"): ("503.000", "604.000"),
        ("4", "embed"): ("10.000", "20.000"),
        ("4", "block"): ("81.000", "132.000"),
        ("4", "head"): ("503.000", "604.000"),
    }
    with (out.parent / sa.LINKS_OUT).open() as f:
        links = [(r["gpus"], r["bandwidth_GBps"], r["per_pair_GBps"]) for r in csv.DictReader(f)]
    assert links == [("2", "200.00", "200.00"), ("8", "40.00", "10.00")]  # 4 pairs share 40


def test_a_folder_without_profiles_is_refused(tmp_path: Path) -> None:
    assert sa.main([str(tmp_path)]) == 2
