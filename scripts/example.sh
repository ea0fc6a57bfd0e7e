#!/usr/bin/env bash
# The main job on built-in examples (called by `make example`): plan VGG-16 on the
# heterogeneous two-node cluster (4x V100 NVLink + 4x T4 PCIe, 10 GbE), then predict the
# written plan file unchanged; ends with the commands to try next.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
mkdir -p out
$BIN/hetplan plan --model vgg16 --dataset imagenet --batch 256 \
  --cluster examples/clusters/hetero-2node.yaml --out out/plan.json
$BIN/hetplan predict --cluster examples/clusters/hetero-2node.yaml --plan out/plan.json
# What to try next: commands that run from the repository root as printed
# (tests/cli/test_example_script.py runs each of them).
cat <<NEXT

Next:
  # the plan's page: Gantt chart of one iteration, memory per device
  $BIN/hetplan predict --cluster examples/clusters/hetero-2node.yaml --plan out/plan.json --html out/plan.html
  # plan for this machine's CPUs (3 processes with speeds 1 : 1/2 : 1/2), then run that plan for real
  $BIN/hetplan plan --model gpt-tiny --batch 16 --cluster examples/clusters/local-cpu-hetero.yaml --out out/cpu-plan.json
  $BIN/hetplan train out/cpu-plan.json --cluster examples/clusters/local-cpu-hetero.yaml --out out/cpu-train.json
  # every option of plan (--wide: every column of the table); README.md lists every command
  $BIN/hetplan plan --help
NEXT
