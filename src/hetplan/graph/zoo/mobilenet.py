"""MobileNetV2 (Sandler et al. 2018), torchvision layout, 3.5M parameters on ImageNet.

Small inputs (CIFAR/MNIST) follow pytorch-cifar: stride-1 stem and stride 1 (not 2) in the
second bottleneck group. Top level: ``stem``, ``block1``..``block17``, ``conv_last``, ``pool``,
``head``.
"""

from __future__ import annotations

import torch
from torch import nn

from hetplan.graph.zoo.common import Dataset, chain

# (expansion t, output channels c, repeats n, first stride s), from the paper's Table 2.
SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1)]
SETTINGS += [(6, 160, 3, 2), (6, 320, 1, 1)]


def _conv_bn(cin: int, cout: int, k: int, stride: int, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU6(),
    )


class InvertedResidual(nn.Module):  # type: ignore[misc]
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = [] if expand == 1 else [_conv_bn(cin, hidden, 1, 1)]
        layers += [
            _conv_bn(hidden, hidden, 3, stride, groups=hidden),
            nn.Conv2d(hidden, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)
        self.use_res = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.conv(x)
        return x + out if self.use_res else out


def mobilenet_v2(ds: Dataset) -> nn.Sequential:
    items: list[tuple[str, nn.Module]] = [
        ("stem", _conv_bn(ds.channels, 32, 3, 1 if ds.small else 2))
    ]
    cin, index = 32, 1
    for group, (t, c, n, s) in enumerate(SETTINGS):
        first_stride = 1 if ds.small and group == 1 else s
        for i in range(n):
            items.append(
                (f"block{index}", InvertedResidual(cin, c, first_stride if i == 0 else 1, t))
            )
            cin, index = c, index + 1
    items += [
        ("conv_last", _conv_bn(cin, 1280, 1, 1)),
        ("pool", nn.AdaptiveAvgPool2d(1)),
        ("head", nn.Sequential(nn.Flatten(), nn.Dropout(0.2), nn.Linear(1280, ds.classes))),
    ]
    return chain(items)
