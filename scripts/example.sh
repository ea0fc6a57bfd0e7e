#!/usr/bin/env bash
# The main job on built-in examples (called by `make example`).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
$BIN/hetplan inspect resnet50 --dataset imagenet
$BIN/hetplan cluster show examples/clusters/hetero-2node.yaml
