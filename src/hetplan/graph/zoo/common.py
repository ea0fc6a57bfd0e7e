"""Dataset presets and small helpers shared by the zoo families."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

from hetplan.errors import ModelError
from hetplan.graph.built import BuiltModel


@dataclass(frozen=True)
class Dataset:
    """Input shape preset of a vision dataset."""

    name: str
    channels: int
    size: int
    classes: int

    @property
    def small(self) -> bool:
        """CIFAR/MNIST-sized inputs get the pytorch-cifar adaptations (3x3 stem, fewer pools)."""
        return self.size <= 64


DATASETS: dict[str, Dataset] = {
    "mnist": Dataset("mnist", 1, 28, 10),
    "cifar10": Dataset("cifar10", 3, 32, 10),
    "imagenet": Dataset("imagenet", 3, 224, 1000),
    "highres": Dataset("highres", 3, 512, 1000),
}


def get_dataset(name: str, model: str) -> Dataset:
    if name not in DATASETS:
        raise ModelError(
            f"model {model!r}: unknown dataset {name!r}; expected one of {', '.join(DATASETS)}"
        )
    return DATASETS[name]


def chain(items: Iterable[tuple[str, nn.Module]]) -> nn.Sequential:
    """A top-level model: named children run strictly in order (the runtime splits on them)."""
    return nn.Sequential(OrderedDict(items))


def vision_model(
    name: str,
    family: str,
    dataset: str | None,
    build: Callable[[Dataset], nn.Module],
    default_dataset: str = "imagenet",
) -> BuiltModel:
    """A classifier over one of the dataset presets."""
    ds = get_dataset(dataset or default_dataset, name)
    return BuiltModel(
        name=name,
        family=family,
        dataset=ds.name,
        factory=lambda: build(ds),
        input_shape=(ds.channels, ds.size, ds.size),
        input_dtype=torch.float32,
        task="classify",
        num_classes=ds.classes,
        target_shape=(),
    )
