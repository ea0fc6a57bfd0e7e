"""A custom model for ``--model``, with what pipeline stages must preserve: skip connections
and a module (with weights) called twice. Also a dataset for ``--data``; nothing is downloaded.
The contract is in docs/custom-models.md. Try::

    hetplan inspect examples/models/residual_mlp.py:model
    hetplan plan --model examples/models/residual_mlp.py:model \\
        --cluster examples/clusters/local-cpu.yaml --batch 32 --out mlp-plan.json
    hetplan train mlp-plan.json --cluster examples/clusters/local-cpu.yaml \\
        --data examples/models/residual_mlp.py:dataset --steps 20
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

FEATURES = 16
WIDTH = 32
CLASSES = 4
SAMPLES = 1024


class ResidualMLP(nn.Module):
    """Its top-level children (``embed``, ``block1``, ``mix``, ``block2``, ``head``) are the
    layers a plan can cut between; ``forward`` may do anything ``torch.fx`` can trace."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(FEATURES, WIDTH)
        self.block1 = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh())
        self.mix = nn.Linear(WIDTH, WIDTH)  # shared: called after each block
        self.block2 = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh())
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = self.embed(x)
        h = self.mix(e + self.block1(e))  # skip connection around block1
        h = h + self.block2(h)  # skip connection around block2
        h = self.mix(h) + e  # mix's weights used again; e skips over every layer between
        return self.head(h)  # (batch, CLASSES) logits: the default loss is cross-entropy


def model() -> tuple[nn.Module, tuple[int, ...]]:
    """No arguments; the module and the shape of one sample (no batch dimension)."""
    return ResidualMLP(), (FEATURES,)


def dataset() -> TensorDataset:
    """(input, target) samples for ``--data``: each class is a noisy point in feature space.
    Fixed seed, so that every rank builds the same samples."""
    gen = torch.Generator().manual_seed(0)
    centres = 3 * torch.randn(CLASSES, FEATURES, generator=gen)
    labels = torch.randint(0, CLASSES, (SAMPLES,), generator=gen)
    inputs = centres[labels] + torch.randn(SAMPLES, FEATURES, generator=gen)
    return TensorDataset(inputs, labels)


def dataset_with_loss() -> tuple[TensorDataset, nn.Module]:
    """The same samples with a loss of our own instead of the default cross-entropy."""
    return dataset(), nn.CrossEntropyLoss(label_smoothing=0.1)
