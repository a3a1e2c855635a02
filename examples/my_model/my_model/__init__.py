"""A user's own model, outside compilebench: a small convolutional classifier of 32x32 images.

compilebench trains it with `model=custom model.target=my_model:build`; its package directory
(examples/my_model) must be importable where the sweep is submitted and where the cells run:
`PYTHONPATH=examples/my_model`, and on a cluster `cluster.setup` or the job's virtualenv.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F

from workloads.models.custom import CustomModel

#: Channels of the two convolutions at each size preset (tiny is what `sweep --smoke` asks for).
WIDTHS = {"tiny": 8, "small": 32, "medium": 64, "large": 128, "xl": 256}
CLASSES = 10
IMAGE = 32


class SmallConvNet(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1)
        self.head = nn.Linear(2 * width, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.relu(self.conv2(x))
        return self.head(x.mean(dim=(2, 3)))


def loss(module: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(module(images), labels)


def make_batch(batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.randn(batch_size, 3, IMAGE, IMAGE, generator=generator)
    return images, torch.randint(CLASSES, (batch_size,), generator=generator)


def read_batches(
    path: str, batch_size: int, generator: torch.Generator
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Real data: a file saved with torch.save((images, labels)), sampled with replacement."""
    images, labels = torch.load(path)
    while True:
        index = torch.randint(len(labels), (batch_size,), generator=generator)
        yield images[index], labels[index]


def build(size: str) -> CustomModel:
    return CustomModel(
        module=SmallConvNet(WIDTHS[size]),
        loss=loss,
        make_batch=make_batch,
        make_optimizer=lambda module: torch.optim.SGD(module.parameters(), lr=0.05, momentum=0.9),
        batch_size=16,
        read_batches=read_batches,
    )
