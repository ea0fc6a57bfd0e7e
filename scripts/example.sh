#!/usr/bin/env bash
# The main job on built-in examples (called by `make example`): plan VGG-16 on the
# heterogeneous two-node cluster (4x V100 NVLink + 4x T4 PCIe, 10 GbE), then predict the
# written plan file unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
mkdir -p out
$BIN/hetplan plan --model vgg16 --dataset imagenet --batch 256 \
  --cluster examples/clusters/hetero-2node.yaml --out out/plan.json
$BIN/hetplan predict --cluster examples/clusters/hetero-2node.yaml --plan out/plan.json
