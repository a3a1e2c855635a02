"""Image batches for vision cells: synthetic tensors, or an ImageFolder tree read through
timm's dataset and loader (JPEG decoding and augmentation in worker processes; on a GPU,
timm's prefetcher normalises on the device in a side stream)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch

from workloads.cell.train import Batch


def _to_memory_format(batches: Iterator[Batch], channels_last: bool) -> Iterator[Batch]:
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    for x, y in batches:
        yield x.contiguous(memory_format=fmt), y


def synthetic_image_batches(
    batch_size: int,
    sample_shape: tuple[int, ...],
    num_classes: int,
    device: torch.device,
    generator: torch.Generator,
    channels_last: bool,
    pool: int = 4,
) -> Iterator[Batch]:
    """Random normalised images and labels made once on the host and cycled from device memory."""
    batches = []
    for _ in range(pool):
        x = torch.randn((batch_size, *sample_shape), generator=generator)
        y = torch.randint(num_classes, (batch_size,), generator=generator)
        batches.append((x.to(device), y.to(device)))

    def cycle() -> Iterator[Batch]:
        while True:
            yield from batches

    return _to_memory_format(cycle(), channels_last)


def imagefolder_batches(
    root: str | Path,
    batch_size: int,
    sample_shape: tuple[int, ...],
    device: torch.device,
    workers: int,
    seed: int,
    channels_last: bool,
    world_size: int = 1,
) -> Iterator[Batch]:
    """Endless training batches from `root/<class>/<image>` through timm's loader; with
    world_size > 1, this rank's part of every epoch (timm's DistributedSampler, in the joined
    process group)."""
    from timm.data import create_dataset, create_loader  # here: sweep expansion imports this module

    dataset = create_dataset("", root=str(root), is_training=True, seed=seed)
    if len(dataset) < batch_size * world_size:  # else an epoch has no full batch, and never ends
        raise ValueError(
            f"{root}: {len(dataset)} images, fewer than one batch of {batch_size} "
            f"for each of {world_size} rank(s)"
        )
    on_gpu = device.type == "cuda"
    loader = create_loader(
        dataset,
        input_size=sample_shape,
        batch_size=batch_size,
        is_training=True,
        num_workers=workers,
        pin_memory=on_gpu,
        use_prefetcher=on_gpu,
        device=device,
        persistent_workers=workers > 0,
        distributed=world_size > 1,
    )

    def epochs() -> Iterator[Batch]:
        while True:
            for x, y in loader:
                yield x.to(device, non_blocking=on_gpu), y.to(device, non_blocking=on_gpu)

    return _to_memory_format(epochs(), channels_last)
