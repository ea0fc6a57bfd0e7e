"""AlexNet, torchvision variant (Krizhevsky 2014 "one weird trick"), 61.1M parameters.

Small inputs (CIFAR/MNIST) use 3x3 stride-1 convolutions, 2x2 pools and a 1024-wide classifier
(a common CIFAR adaptation; pytorch-cifar has no AlexNet).
Top level: ``conv1``..``conv5`` (conv + relu [+ max-pool]), ``pool``, ``fc6``, ``fc7``, ``head``.
"""

from __future__ import annotations

from torch import nn

from hetplan.graph.zoo.common import Dataset, chain


def alexnet(ds: Dataset) -> nn.Sequential:
    c = ds.channels
    if ds.small:
        first = nn.Conv2d(c, 64, 3, 1, 1)
        second = nn.Conv2d(64, 192, 3, padding=1)
        pool_k, pool_s, grid, width = 2, 2, 2, 1024
    else:
        first = nn.Conv2d(c, 64, 11, 4, 2)
        second = nn.Conv2d(64, 192, 5, padding=2)
        pool_k, pool_s, grid, width = 3, 2, 6, 4096

    def pool() -> nn.Module:
        return nn.MaxPool2d(pool_k, pool_s, ceil_mode=ds.small)

    return chain(
        [
            ("conv1", nn.Sequential(first, nn.ReLU(), pool())),
            ("conv2", nn.Sequential(second, nn.ReLU(), pool())),
            ("conv3", nn.Sequential(nn.Conv2d(192, 384, 3, padding=1), nn.ReLU())),
            ("conv4", nn.Sequential(nn.Conv2d(384, 256, 3, padding=1), nn.ReLU())),
            ("conv5", nn.Sequential(nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), pool())),
            ("pool", nn.AdaptiveAvgPool2d(grid)),
            (
                "fc6",
                nn.Sequential(
                    nn.Flatten(), nn.Dropout(), nn.Linear(256 * grid * grid, width), nn.ReLU()
                ),
            ),
            ("fc7", nn.Sequential(nn.Dropout(), nn.Linear(width, width), nn.ReLU())),
            ("head", nn.Sequential(nn.Linear(width, ds.classes))),
        ]
    )
