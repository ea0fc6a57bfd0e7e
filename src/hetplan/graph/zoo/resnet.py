"""ResNet-18/50/152 (He et al. 2016), torchvision layout; CIFAR/MNIST as in pytorch-cifar.

Top level: ``stem``, ``layer{s}_{b}`` (one residual block each), ``pool``, ``head``.
Small inputs (CIFAR/MNIST) use a 3x3 stride-1 stem without max-pool (kuangliu/pytorch-cifar).
"""

from __future__ import annotations

import torch
from torch import nn

from hetplan.graph.zoo.common import Dataset, chain


class BasicBlock(nn.Module):  # type: ignore[misc]
    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.downsample = _shortcut(cin, planes * self.expansion, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.downsample(x))


class Bottleneck(nn.Module):  # type: ignore[misc]
    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int) -> None:
        super().__init__()
        out = planes * self.expansion
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU()
        self.downsample = _shortcut(cin, out, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + self.downsample(x))


def _shortcut(cin: int, cout: int, stride: int) -> nn.Module:
    if stride == 1 and cin == cout:
        return nn.Identity()
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


def _stem(ds: Dataset, width: int) -> nn.Module:
    if ds.small:
        return nn.Sequential(
            nn.Conv2d(ds.channels, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
    return nn.Sequential(
        nn.Conv2d(ds.channels, width, 7, 2, 3, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
    )


def resnet(
    ds: Dataset, block: type[BasicBlock | Bottleneck], blocks: list[int], width: int = 64
) -> nn.Sequential:
    items: list[tuple[str, nn.Module]] = [("stem", _stem(ds, width))]
    cin = width
    for stage, count in enumerate(blocks):
        planes = width * 2**stage
        for i in range(count):
            stride = 2 if stage > 0 and i == 0 else 1
            items.append((f"layer{stage + 1}_{i}", block(cin, planes, stride)))
            cin = planes * block.expansion
    items.append(("pool", nn.AdaptiveAvgPool2d(1)))
    items.append(("head", nn.Sequential(nn.Flatten(), nn.Linear(cin, ds.classes))))
    return chain(items)


def resnet18(ds: Dataset) -> nn.Sequential:
    return resnet(ds, BasicBlock, [2, 2, 2, 2])


def resnet50(ds: Dataset) -> nn.Sequential:
    return resnet(ds, Bottleneck, [3, 4, 6, 3])


def resnet152(ds: Dataset) -> nn.Sequential:
    return resnet(ds, Bottleneck, [3, 8, 36, 3])


def resnet_tiny(ds: Dataset) -> nn.Sequential:
    """A two-stage basic-block ResNet of width 8 for fast tests and CPU benchmarks."""
    return resnet(ds, BasicBlock, [1, 1], width=8)
