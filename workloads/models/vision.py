"""Vision models from timm, trained from random initialisation (nothing is downloaded).

`resnet` maps the size presets onto the ResNets of the seminar report; `timm` takes any
model name timm knows (`model.arch`), with the size preset giving only batch and resolution.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from workloads.cell.catalog import is_timm_model


@dataclass(frozen=True)
class VisionSize:
    arch: str
    """Default timm architecture of the `resnet` family at this size."""
    image_size: int
    """Square input resolution in pixels."""
    batch_size: int
    """Default batch (images per step)."""


VISION_SIZES: dict[str, VisionSize] = {
    "tiny": VisionSize(arch="resnet10t", image_size=64, batch_size=4),
    "small": VisionSize(arch="resnet18", image_size=224, batch_size=256),
    "medium": VisionSize(arch="resnet34", image_size=224, batch_size=256),
    "large": VisionSize(arch="resnet50", image_size=224, batch_size=256),
    "xl": VisionSize(arch="resnet101", image_size=224, batch_size=256),
}

NUM_CLASSES = 1000


def create_timm_model(arch: str) -> nn.Module:
    """A randomly initialised timm model with ImageNet's 1000 classes."""
    import timm

    if not is_timm_model(arch):
        raise ValueError(f"timm has no model named {arch!r}")
    return timm.create_model(arch, pretrained=False, num_classes=NUM_CLASSES)
