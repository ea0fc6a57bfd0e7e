"""VGG-11/16 (Simonyan & Zisserman 2015): torchvision layout (no batch norm) for ImageNet;
pytorch-cifar layout (batch norm, one 512->classes linear) for CIFAR/MNIST.

Top level: ``conv{b}_{i}`` (conv + [bn] + relu), ``pool{b}``, then ``avgpool``, ``fc6``,
``fc7``, ``head`` (ImageNet) or ``pool``, ``head`` (small inputs).
"""

from __future__ import annotations

from torch import nn

from hetplan.graph.zoo.common import Dataset, chain

CONFIGS: dict[str, list[list[int]]] = {
    "vgg11": [[64], [128], [256, 256], [512, 512], [512, 512]],
    "vgg16": [[64, 64], [128, 128], [256, 256, 256], [512, 512, 512], [512, 512, 512]],
}


def _conv(cin: int, cout: int, bn: bool) -> nn.Module:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, 3, padding=1)]
    if bn:
        layers.append(nn.BatchNorm2d(cout))
    layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def vgg(ds: Dataset, config: str) -> nn.Sequential:
    items: list[tuple[str, nn.Module]] = []
    cin = ds.channels
    for b, widths in enumerate(CONFIGS[config], start=1):
        for i, cout in enumerate(widths, start=1):
            items.append((f"conv{b}_{i}", _conv(cin, cout, bn=ds.small)))
            cin = cout
        # ceil_mode keeps 28x28 MNIST at 1x1 after five pools (28-14-7-4-2-1).
        items.append((f"pool{b}", nn.MaxPool2d(2, 2, ceil_mode=ds.small)))
    if ds.small:
        items.append(("pool", nn.AdaptiveAvgPool2d(1)))
        items.append(("head", nn.Sequential(nn.Flatten(), nn.Linear(cin, ds.classes))))
        return chain(items)
    items += [
        ("avgpool", nn.AdaptiveAvgPool2d(7)),
        ("fc6", nn.Sequential(nn.Flatten(), nn.Linear(cin * 49, 4096), nn.ReLU(), nn.Dropout())),
        ("fc7", nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout())),
        ("head", nn.Sequential(nn.Linear(4096, ds.classes))),
    ]
    return chain(items)


def vgg11(ds: Dataset) -> nn.Sequential:
    return vgg(ds, "vgg11")


def vgg16(ds: Dataset) -> nn.Sequential:
    return vgg(ds, "vgg16")
