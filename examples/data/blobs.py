"""A small training example for ``hetplan train --data``: no downloads, data made on the fly.

``model`` is a five-layer perceptron over 16 features; ``dataset`` returns 4,096 samples of
four Gaussian blobs (map-style, in memory); ``stream`` the same samples as an iterable dataset
read from a CSV file that it writes next to this file on first use. Try::

    hetplan plan --model examples/data/blobs.py:model \\
        --cluster examples/clusters/local-cpu-hetero.yaml --batch 64 --out blobs-plan.json
    hetplan train blobs-plan.json --cluster examples/clusters/local-cpu-hetero.yaml \\
        --data examples/data/blobs.py:dataset --steps 50 --checkpoint out/blobs-ckpt
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import IterableDataset, TensorDataset

FEATURES = 16
CLASSES = 4
SAMPLES = 4096
SPREAD = 1.5  # standard deviation of each blob around its centre
CSV_FILE = Path(__file__).with_name("blobs.csv")


def model() -> tuple[nn.Module, tuple[int, ...]]:
    """The network and the shape of one sample."""
    net = nn.Sequential(
        nn.Linear(FEATURES, 64),
        nn.ReLU(),
        nn.Linear(64, 64),
        nn.ReLU(),
        nn.Linear(64, CLASSES),
    )
    return net, (FEATURES,)


def _samples() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1234)
    centres = torch.randn(CLASSES, FEATURES, generator=gen) * 3
    labels = torch.randint(0, CLASSES, (SAMPLES,), generator=gen)
    inputs = centres[labels] + SPREAD * torch.randn(SAMPLES, FEATURES, generator=gen)
    return inputs, labels


def dataset() -> TensorDataset:
    """Map-style: (16 features, class) pairs; the model's default loss (cross-entropy)."""
    return TensorDataset(*_samples())


class CsvStream(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """An iterable dataset reading one sample per CSV row (features..., label)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        with open(self.path, newline="") as f:
            for row in csv.reader(f):
                *x, y = row
                yield torch.tensor([float(v) for v in x]), torch.tensor(int(y))


def stream() -> tuple[CsvStream, nn.Module]:
    """Iterable: the same samples from a CSV file (written once), with an explicit loss."""
    if not CSV_FILE.exists():
        inputs, labels = _samples()
        tmp = CSV_FILE.with_suffix(f".{os.getpid()}.tmp")  # ranks may race
        with open(tmp, "w", newline="") as f:
            writer = csv.writer(f)
            for x, y in zip(inputs.tolist(), labels.tolist(), strict=True):
                writer.writerow([f"{v:.6f}" for v in x] + [y])
        tmp.replace(CSV_FILE)
    return CsvStream(CSV_FILE), nn.CrossEntropyLoss()
