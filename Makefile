# Two entry points (see README "Quick start"); each creates .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: example test lint typecheck clean gpu-check

$(STAMP): pyproject.toml requirements-dev.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.txt -e '.[dev]'
	touch $(STAMP)

example: $(STAMP)
	./scripts/example.sh

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples scripts
	$(BIN)/ruff format --check src tests benchmarks examples scripts

typecheck: $(STAMP)
	$(BIN)/mypy

test: $(STAMP) lint typecheck
	$(BIN)/pytest -n 2 -q

clean:
	rm -rf $(VENV)

# On a machine with CUDA: the gpu-marked tests and the GPU benchmarks, report in out/gpu-check.md
# (record it in docs/benchmarks.md). Without the venv: PYTHONPATH=src python3 benchmarks/gpu_check.py
gpu-check: $(STAMP)
	$(BIN)/pip install --quiet 'nvidia-ml-py>=12'
	$(BIN)/python benchmarks/gpu_check.py
